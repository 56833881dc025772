"""results/compare: every finished run of every workload on one page.

A finished run is a published folder `results/<workload>/<run>/` with provenance.json:
`runs` finds them (Snakemake reads it while planning, so it imports nothing heavy), `rows`
reads each run's files into one row (quality metric, throughput, time to train, reference
ratio, step breakdown, cost) and marks the fastest and the most accurate run of each
workload, `plots` draws the figures, `page` writes the standalone HTML page and `write`
writes the folder. Everything comes from the run folders, so the page always agrees with
the runs it shows.
"""
