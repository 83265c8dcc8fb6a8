"""Maintainer scripts that are not asv benchmarks: the README/docs tables, the measured spreads
the gate's tolerances and asv's thresholds come from, a decoder profile. asv collects
benchmarks from bench/ only."""
