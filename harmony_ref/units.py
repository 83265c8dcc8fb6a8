"""Unit constants, in one place, so no module converts units inline.

Decimal prefixes throughout (datasheets quote decimal GB/s and TOPS); binary sizes are named
`MIB`/`GIB` and only used where a number is printed as MiB/GiB on purpose.
"""

KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12

KB = 1_000
MB = 1_000_000
GB = 1_000_000_000
KIB = 1024
MIB = 1024**2
GIB = 1024**3

US_PER_S = 1e6
MS_PER_S = 1e3
NS_PER_S = 1e9
