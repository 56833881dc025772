"""The config and what is computed from it alone: the schema and validation, typed views of
its blocks, the grid, seeds, quality targets, reference recipes, where stages run, the
reference docs."""
