"""Figures, summaries and pages over finished runs: training curves, the published run folder,
benchmark tables, the leaderboard and the seed runs' time to target."""
