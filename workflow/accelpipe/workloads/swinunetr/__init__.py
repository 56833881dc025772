"""The swinunetr workload: `declaration` (no framework), `workload` (train, evaluate) and its data
files. Import-free: importing the declaration runs this."""
