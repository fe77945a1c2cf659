"""Kernels: numpy functions and compiled (numba) loops over arrays, each testable on a
small array in a millisecond. The key code (`keys`), counting a unit (`counting`),
merging runs (`merging`), the selection maths (`selection`), ranking the table
(`ranking`, `layout`), partial counts and scans of a refresh (`partials`, `scans`), the
longest match (`matching`), and a flat range as a token stream (`streams`). Kernels
import nothing from the I/O layer or the formats."""
