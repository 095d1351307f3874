"""The pure core: policies, their steps and results; standard library only, no I/O, no clock."""
