"""Workloads: one folder each (`<name>/`: its declaration, its framework module `workload`
and its data files; docs/development.md, "Adding a workload"), and `base` (the `Workload`
protocol the stages call). Import-free: every declaration's import runs this."""
