"""The host's load over a run's training: whether other processes took CPUs the job could
use, so that its figures undercount (performance.json's `host`)."""

from __future__ import annotations

from typing import Any

# A host is oversubscribed over a run's training when other processes took more than this
# share of the CPUs the job could use (their CPU seconds / (wall seconds x usable CPUs)), or
# when the 1-minute load average at the end, less the job's own mean CPU use, exceeds the
# host's cores (more runnable threads of others than cores). Its figures then undercount.
OTHER_CPU_SHARE_LIMIT = 0.1


def host_load(host: dict[str, Any] | None) -> dict[str, Any]:
    """performance.json's `host`: the train stage's host facts (devices.host.HostWindow over
    the training loop: CPU model, cores, load averages, the job's and other processes' CPU
    seconds) with `other_cpu_share`, `oversubscribed` and the `warning` to show where it is;
    `oversubscribed` None where the facts cannot tell (an older run, no /proc)."""
    if not host:
        return {
            "oversubscribed": None,
            "other_cpu_share": None,
            "warning": None,
            "note": "no host facts in the train stage.json (trained before they were recorded)",
        }
    window, cpus, other = host["window_s"], host["usable_cpus"], host["other_cpu_s"]
    share = other / (window * cpus) if other is not None and window > 0 and cpus else None
    load = (host.get("load_average_end") or [None])[0]
    own = host["job_cpu_s"] / window if host.get("job_cpu_s") is not None and window > 0 else 0
    others_load = load - own if load is not None else None
    reasons = []
    if share is not None and share > OTHER_CPU_SHARE_LIMIT:
        reasons.append(
            f"other processes used {share:.0%} of the {cpus} CPUs this job could use over its "
            f"{window:.1f} s of training (more than {OTHER_CPU_SHARE_LIMIT:.0%})"
        )
    if others_load is not None and host.get("cores") and others_load > host["cores"]:
        reasons.append(
            f"the 1-minute load average was {load:.1f} at the end of training, "
            f"{others_load:.1f} besides this job, on {host['cores']} cores"
        )
    judged = share is not None or others_load is not None
    warning = (
        "host oversubscribed: " + "; and ".join(reasons) + ": throughput, step times and "
        "time to train may be lower than the device allows"
        if reasons
        else None
    )
    if share is not None:
        note = f"other processes: {share:.1%} of {cpus} CPUs over {window:.1f} s of training"
    else:
        note = f"CPU times not measured: {host.get('not_measured') or 'no window'}"
    return host | {
        "other_cpu_share": round(share, 4) if share is not None else None,
        "oversubscribed": bool(reasons) if judged else None,
        "warning": warning,
        "note": warning or note,
    }
