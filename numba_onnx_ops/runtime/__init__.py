"""What every kernel stands on: jit and cache, threads, memory, CPU features, vector code."""
