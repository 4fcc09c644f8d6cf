"""HTML reports built from the results store (build/results.sqlite) only."""
