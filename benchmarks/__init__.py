"""Benchmarks: diskferry against its peer tools, as ratios measured in the same run."""
