"""The toy workload (tests/workflow/test_new_workload.py copies this folder into a workflow copy
as workloads/toy/): the worked example of docs/development.md, "Adding a workload"."""
