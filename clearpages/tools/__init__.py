"""The measuring side of clearpages: what tells how fast the library is on a
machine and why it chooses as it does, and the command line that shows it.

    measure    buffers warm and cold, candidates, interleaved timing
    calibrate  this machine's crossovers, measured (what ``calibrate`` writes)
    profile    machine profiles and the policy replayed against them
    programs   whole programs: a clear and then its use
    generated  programs drawn from a seed, and the hand-written cases, as phases
    phased     phased programs run with every candidate; auto judged on them
    scanbench  is_zero and nonzero_pages against their alternatives
    report     what ``info`` and ``bench`` show, as data
    output     tables, progress and plots: how it is printed
    cli        ``python -m clearpages``: parses arguments and prints
    lowlevel   the library's inner handles that benchmarks time directly

The arrows point one way: these modules import the library (``clearpages``
and its private modules); the library never imports them, so ``import
clearpages`` loads none of this.  bench/ takes what it needs from here.
"""
