"""Fake device that prints something that is no benchmark format, and exits 0."""

import sys

sys.stdout.write("\x1b[31m#@!\x00 bad data 12.5 ms 3 tokens/s {not json\n")
sys.stdout.write("Model = ?, NumThreads = x\n")
