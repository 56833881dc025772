"""Datasets: one module per dataset (fetch, synthesize, prepare) plus shared download code."""
