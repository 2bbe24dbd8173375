"""Every crossover: the sizes at which one way of computing overtakes another, per CPU where
they differ.

The dispatch code reads these (``tuning.NAME``) when it decides a kind of call, and the
call plans keep the decisions (``core.plans``): a test or an experiment moves a value here,
then calls ``core.plans.clear()``.  The kernels read ``PREFETCH_MIN_K`` and ``PACK_ROWS``
while they compile; the numba cache's sources stamp covers this module, so an edit recompiles
them.  The measurements behind each value are kept with the benchmark that measures it
(``benchmarks/``, ``docs/design.md``).
"""

from __future__ import annotations

import numpy as np

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

# --- MatMul: numpy's BLAS or the own kernels (benchmarks/matmul.py) ---------------------------
# On CPUs with the vector micro-kernel (AVX2 and FMA) the own kernels take every float product.
# Elsewhere single float products stay with OpenBLAS, which packs its operands; numpy calls it
# once per matrix of a batch, and runs small ones on one thread: a float batch of at least
# OWN_MIN_BATCH matrices of at most OWN_MAX_MNK multiply-adds each goes to the plain own
# kernels.  float64's vectors hold half as many lanes, so it crosses over later.
OWN_MIN_BATCH = {_F32: 1024, _F64: 4096}
OWN_MAX_MNK = {_F32: 48**3, _F64: 16**3}

# float16/bfloat16 products of at least this many multiply-adds per matrix go to float32
# panels; below it the panel steps per matrix cost more than they save.
HALF_PANELS_MIN = 192**3

# float16/bfloat16 products of more than DIRECT_HALF_MAX_MNK multiply-adds a matrix (and fewer
# than HALF_PANELS_MIN) and at least HALF_WIDEN_MIN_ROWS rows (and a vector of float32 columns),
# alone or in batches, are widened to float32 whole on the calling thread, multiplied by the
# float32 product's plan and narrowed (``half_panels.widened_plan``), where the packed kernel's
# scalar blocks ran them at a fraction of the micro-kernel's speed (benchmarks/matmul.py,
# MatMulHalfWidened; the batches: docs/design.md, "Half types").  AMD Zen
# 3 (avx2 fma f16c), the two sides alternated in one process, medians of 11 rounds, packed /
# widened in us, 1 thread and 2: float16 32x256x256 301 / 196 and 356 / 140; 64x128x64 75 / 56
# and 82 / 54; 128^3 266 / 159 and 202 / 171; 8x256x256 177 / 62 and 187 / 64; bfloat16
# 32x256x256 231 / 206 and 245 / 223; 64x128x64 72 / 59 and 80 / 58; 8x256x256 96 / 68 and 103
# / 65.  Fewer rows widen a B that the product reads once: float16 4x512x512 607 / 626 and 369
# / 703 (the product on the pool).  At most DIRECT_HALF_MAX_MNK the direct kernel, which widens
# as it reads, stays ahead: float16 64^3 39 / 42 us, 32x64x64 24 / 30 on 1 thread.
HALF_WIDEN_MIN_ROWS = 8
# The float32 product of those widened operands runs on the calling thread, which has just
# written them, up to this many multiply-adds: on the pool the other core fetched them from the
# calling core's cache.  Zen 3, as above, the product on the pool, 1 / 2 threads: float16
# 8x256x256 61 / 125 us, 64x128x64 57 / 81; 128^3 163 / 174; 32x256x256 193 / 170; 96x192x192
# 311 / 258.
HALF_WIDEN_HERE_MAX = 1 << 20

# Batches of the other bfloat16 products short of the panels (at most DIRECT_HALF_MAX_MNK a
# matrix, or fewer than HALF_WIDEN_MIN_ROWS rows), C-contiguous, of at least this many
# multiply-adds in all, are widened to float32 whole, multiplied on the micro-kernel and
# narrowed (``half_panels.widened_plan``, which takes the rest at any count).  Zen 3, own
# kernels / widened, 1 thread and 2: bfloat16 16 x 64^3 739 / 346 and 1095 / 300 us; below it,
# 16 x 32x64x32 164 / 109 and 90 / 131, 256 x 16^3 237 / 271 and 130 / 264.  float16's batches
# of these keep the own kernels, which widen as they read: 256 x 32^3 1124 / 1057 and 689 / 856.
HALF_BATCH_MIN = 1 << 22

# bfloat16 products of at least PAIRS_MIN_MNK multiply-adds per matrix and PAIRS_MIN_N columns
# (two vectors: with one, loads rather than dot products bound a row block) take AVX512_BF16's
# pair dot products, on CPUs where those are fast; smaller ones cost more to pack than the
# widening kernels take.  Batches pack on the calling thread up to PAIRS_PACK_HERE_MAX
# elements of A and B in all, and multiply there up to PAIRS_HERE_MAX multiply-adds in all:
# on two threads of Zen 4 the pool's launch, and the packed operands moving from the packing
# core's cache to the other's, made the pool slower than the calling thread alone up to about
# 4M (64x256x256: 79-92 against 65 us; 128x256x256: 87 against 95).
PAIRS_MIN_MNK = 1 << 18
PAIRS_MIN_N = 32
PAIRS_PACK_HERE_MAX = 1 << 18
PAIRS_HERE_MAX = 1 << 22

# --- MatMul: which own kernel (benchmarks/matmul.py, MatMulBatched) ----------------------------
# The vector micro-kernel walks K in blocks of at most this many terms: a strip of B of that
# many rows (64 float32 or 32 float64 columns: 128 KiB) stays in the L2 of each CPU kind
# (512 KiB per core on Zen 3, 1 MiB on Zen 4, 2 MiB on the Xeons) while A's rows pass it
# (the measurements: docs/design.md, "The accumulation order").
VECTOR_KC = {_F32: 512, _F64: 512}
# matmul_vector's tasks copy each strip of B they take into consecutive rows before its row
# blocks read it (``own.packs_strips``; BLIS's packed panel of B, made by the task that uses it)
# where at least PACK_MIN_ROWS rows pass each strip and B's rows span at least PACK_MIN_SPAN
# bytes over a block of K.  Read in place from a B whose rows lie a large power of two apart (a
# width of 512 or 1024 float32, or 3072 = 3 * 1024), a strip falls into a few sets of the L2
# cache, which holds a fraction of it, and each row block fetches the rest again from L3
# (benchmarks/matmul.py, MatMulPackedB); read from the copy in L1, AVX2's four-row blocks
# (``own.fitted_tile``) keep the FMA units busy where they starve on a strip in place.  AMD Zen
# 3 (avx2 fma), the plans interleaved in one process, a pause after each contender, medians of
# 5 rounds, in place -> copied: float32 128x512x512 1016 -> 772 us on 1 thread, 517 -> 405 on
# 2; 32x1024x1024 1441 -> 1030 us, 738 -> 499; float64 128x512x512 2808 -> 1666 us, 1537 ->
# 867; 256^3 1005 -> 788 us.  B spanning 256 KiB (512 KiB -> no bound): float32 256^3 403 ->
# 378 us on 1 thread, 207 -> 196 on 2; 32x256x256 68 -> 59 us; 8 x 256^3 by 8 x 256^3
# broadcast 27.5 -> 26.7 ms, 15.5 -> 12.2 on 2.  B spanning 32 KiB (128 KiB -> 32 KiB, medians
# of 9 rounds): float32 64 x 128x64 by 64 x 64x128 2048 -> 1860 us on 1 thread, 1052 -> 957 on
# 2; 32x128x128 18 -> 15 us on 2 (a first run of 5 rounds had shown the batch slower, 1872 ->
# 2103 us: the machine's noise).  Below 32 KiB (-> no bound, 7 rounds): float32 512 x 32^3 548
# -> 583 us on 1 thread, 64^3 10 -> 11 us, the rest unchanged.  Against all of B copied on the
# calling thread by numpy before the product (this crossover was 2^29 multiply-adds a matrix
# then), with the strips copied one at a time: float32 1024^3 26.0 -> 25.0 ms on 1 thread,
# 14.4 -> 12.7 on 2; float64 1024^3 on 2 threads 32.4 -> 28.1 ms.  Few rows do not repay the
# copy: float32 16x3072x768 1292 -> 1474 us on 1 thread (fastest of 8 rounds).
PACK_MIN_ROWS = 32
PACK_MIN_SPAN = 1 << 15
# A task copies the strips of its items in groups of up to PACK_PANEL bytes (in L2 while their
# row blocks pass), PACK_ROWS rows of each strip of the group in turn: each row of B is then
# read along the group's columns.  Strip by strip, B's rows a page apart (1024 float32) cost a
# TLB miss for every 64 bytes copied.  Zen 3, the plans interleaved in one process, medians of
# 5 rounds, groups of 64 / 256 / 512 KiB: float32 32x1024x1024 1232 / 1027 / 1034 us on 1
# thread, 716 / 559 / 547 on 2; 128x768x3072 7875 / 7510 / 7501 on 1; float64 32x1024x1024
# 2710 / 2245 / 2181 on 1, 1205 / 1045 / 1061 on 2.  PACK_ROWS 4 / 16 / 64 (a process each,
# two each): float32 32x1024x1024 962-993 / 1037-1129 / 1196-1222 us, 128x768x3072 7436-10112 /
# 7333-7349 / 7877-7957 us, float64 32x1024x1024 2123-3252 / 2076-2403 / 2240-2360 us.
PACK_PANEL = 1 << 18
PACK_ROWS = 16  # (a compile-time constant of the kernel)
# With B's strips copied, the blocks of K are longer: a copied strip of 1024 rows (256 KiB of
# the float32 tile's 64 columns) stays in L2 as well, and C is read and written half as often.
# Zen 4, float32, B packed whole, one process, K blocks of 512 / 1024 (medians of 9): 1024^3
# on 1 thread 20.4 / 19.7 and 20.6 / 20.2 ms, on 2 threads 11.8 / 11.0 and 10.7 / 10.5 ms;
# 2048^3 165.5 / 164.5 ms on 1, 86.4 / 83.1 ms on 2; float64 1024^3 41.2 / 40.3 ms on 1, 23.2 /
# 21.9 on 2.
# (B read in place keeps VECTOR_KC: 16x3072x768 1.30 / 1.42 ms, 256x4096x256 5.6 / 5.9 ms on
# 1 thread.)
PACKED_KC = {_F32: 1024, _F64: 1024}
# On AVX2, float32 products of at most FEW_ROWS_MAX rows (each matrix's, B read in place) take
# blocks of 4 rows by 3 vectors (24 columns) instead of 6 by 2 where those compute fewer
# elements (``own.few_rows_tile``): 2, 3, 4 or 8 rows leave no rows to spare in blocks of four,
# and the wider strip reads A once for 24 columns.  Zen 3 (avx2 fma), one thread, the kernel
# alone, medians of 7 rounds, 6x2 / 4x3 (numpy's OpenBLAS): 2x1024x1024 929 / 610 us (541);
# 4x1024x1024 775 / 631 (575); 8x1024x1024 1452 / 848 (741); 8x256x256 77 / 58 (79).  16 rows
# were a wash within the machine's noise over B streamed from memory (16x1024x1024 1242 / 1091
# then 1032 / 1008 us; 16x3072x768 1918 / 1716 then 1897 / 2428, where a strip of 24 columns
# by 512 rows, 48 KiB, no longer fits L1 for the four blocks that pass it) though they gained
# over B in cache (16x512x512 341 / 263), so they keep 6x2.  10 rows, 12 computed either way:
# 926 / 1028.  Float64 gained where B stays in cache (8x256x256 160 / 121 us) and lost where
# it streams (4x1024x1024 1112 / 1272), so it keeps 6x2.
FEW_ROWS_MAX = 8
# matmul_vector's tasks on the pool: groups of rows with all of B's strips (``own.row_groups``)
# where the batch gives a thread fewer than this many tasks and B's block of K rows fits this
# many bytes, which stay in each core's L2 (half of AMD Zen 3's, a quarter of Zen 4's); else
# strips with all the rows.  Float32 on 2 threads, AMD Zen 4, the two plans interleaved in one
# process (medians of 31 x 100 calls, three processes), strips -> groups: 64x128x128 20.0 ->
# 19.6, 25.2 -> 24.1, 37.2 -> 32.4 us; MatMul -> Pow -> MatMul at batch 32, width 256, called
# from Python, 66.6 -> 65.1, 79.7 -> 77.6, 112 -> 99 us; 32x256x256 alone within 1 us.
ROW_GROUPS_PER_THREAD = 2
ROW_GROUPS_MAX_B = 256 * 1024
# matmul_direct keeps a K x (two vectors) strip of B per task; past this K (a 256 KiB strip of
# float32) the packed kernel, which blocks K, takes over.
DIRECT_KMAX = 4096
# Half types widen A at every use in matmul_direct, so past this many multiply-adds they go
# to the packed kernel, which widens each element once.
DIRECT_HALF_MAX_MNK = 1 << 18
# matmul_small: B of one to two vectors of columns and M, K at most this (its SLP-vectorized
# rows hold the whole strip in registers).
SMALL_MAX_MK = 64
# Straight-line code per shape (``matmul_whole``) for products of at most WHOLE_MAX_M rows and
# WHOLE_MAX_K terms (by vector width: AVX2's 16 registers hold sums of up to 32 terms in row
# groups, AVX-512 code gains only for the shortest K, where the blocked kernels' loop overhead
# dominates).
WHOLE_MAX_M = 16
WHOLE_MAX_K = {512: 8, 256: 32}
# The vector micro-kernel prefetches the next block's C rows once K is this long (shorter
# blocks finish before the lines would arrive).
PREFETCH_MIN_K = 64

# --- The own pool (runtime/pool.py; docs/design.md, "The own pool") ---------------------------
# Own-kernel MatMul products on more than one thread run on the package's own worker threads
# (Linux on x86-64), not on numba's threading layer: a job costs the caller about half a
# microsecond where a TBB launch costs 4-37 us.  False: numba's layer, as elsewhere.
OWN_POOL = True
# How long a worker spins after its last job before it sleeps (until the next job wakes it;
# read when the workers start): a model's products follow one another within tens of
# microseconds, and a worker that spins longer takes a core from whatever runs next.
POOL_SPIN_US = 200

# --- The calling thread or the pool (benchmarks/percall.py: MatMulHereOrPool, PowHereOrPool) -
# Own-kernel MatMul products of at most these many multiply-adds in all run on the calling
# thread (the kernels' serial twins); 64-bit integers multiply at a fraction of the others'
# rate.  On the own pool a job costs the caller about half a microsecond, so the pool wins from
# some 10 us of work.  Measured on AMD Zen 4 (2 vCPUs, KVM; avx512), the calling thread / the
# own pool, medians of 7 x 100 calls after 20 ms pauses, two processes each: float32 16x64x64
# 3.6-5.4 / 4.7 us, 32x64x64 4.7-6.8 / 5.3-5.4, 64^3 7.2-9.3 / 6.6-7.1, 64x128x64 11.8-14.2 /
# 8.9-9.3; int64 48^3 7.3-9.8 / 7.5-10.3, 64^3 14.0-17.2 / 10.2-13.4; a float32 matrix-vector
# product 256x256 by 256 6.6-7.9 / 8.1-8.5 us.
MATMUL_HERE_MAX = 1 << 17
# One row of A by a B of unit row stride (``x @ W.T``, ``kernels.matmul_row_columns``): each
# element of the result is one chain of fused multiply-adds over all of K, in order, so the
# columns of B read at once, one chain per vector of them, carry the FMAs' latency; more
# streams along B's columns than the prefetchers follow cost more than they save.  AMD Zen 3
# (avx2 fma), 1 thread, medians of 5 interleaved rounds, ours at 8 / 16 / 32 / 48 / 64
# columns (numpy's OpenBLAS, which sums each row in its own order): float32 1x768x3072 417-452
# / 288-397 / 396-413 / 633-728 / 813-855 us (188-204); float64 1x768x3072 at 4 / 8 / 16 / 32
# columns 880-942 / 514-572 / 487-572 / 1568-1663 (468-509).  On 2 threads 16 / 32 columns
# moved between 375-383 / 234-277 us (116-123); not taken: 1 thread is the steadier.  Columns
# 4 KiB apart fall in one set of L1 (``own.columns_at_once`` halves them): float32 1x1024x1024
# at 8 / 16 columns 183 / 297 us (numpy 93), 1x2048x1024 356 / 600 (164); 2 KiB apart
# (1x512x1024, two sets) 109 / 107 (52).
ROW_COLUMNS = 16
# Float products of an A of unit row stride (a transposed A, ``A.T @ B``) of at least this many
# multiply-adds copy A's rows to a C-contiguous array first (``own._with_rows_of_a``): the
# micro-kernel reads such rows with constant strides.  AMD Zen 3 (avx2 fma), float32, medians of
# 5 interleaved rounds, A read in place / rows copied (A C-contiguous; numpy with A.T), 1 thread:
# 16^3 3.7 / 8.2 us (4.2; 2.7); 64^3 25.3 / 24.6 (17.7; 15.2); 32x256x256 145 / 101 (87; 91);
# 128x256x256 501 / 281 (275; 254); 256^3 931 / 527 (489; 452); 512^3 5757 / 3411 (3359; 3070).
# 2 threads: 64^3 22.7 / 27.4 (21.4; 16.0); 256^3 469 / 336 (248; 274); 512^3 3470 / 1844 (1631;
# 1704).  So from 2^19 on: 64^3 (2^18) gains nothing on 1 thread and loses on 2.
ROWS_OF_A_MIN = 1 << 19
MATMUL_HERE_MAX_INT64 = 1 << 16
# On numba's threading layer (``OWN_POOL`` False, or no own pool) a launch costs more, so up to
# this many times more work stays on the calling thread.  On the AMD EPYC Zen 3 virtual
# machine measured (2 vCPUs, avx2 fma f16c) a launch cost 14-17 us; calling thread / pool,
# medians: int32 80^3 29 / 37 us, 96^3 47 / 47 us; float16 (1024,8,8)^2 93 / 111 us,
# (2048,8,8)^2 209 / 194 us; int64 48^3 34 / 46 us, 64^3 91 / 78 us.
MATMUL_HERE_LAYER_FACTOR = 4
# Pow results of at most this many elements (by exponent class: GENERAL costs several times the
# others per element) run on the calling thread, one chunk at most (``kernels.CHUNK``): on
# that machine the calling thread won at every size up to the chunk, float32 ** 3.7 on 16,384
# elements 38 / 57 us, float64 71 / 99 us, float32 ** 2 3.9 / 30 us.
POW_HERE_MAX = {"general": 16384, "other": 16384}

# --- Pow: half-type result tables (benchmarks/power.py, PowHalfTable) -------------------------
# A half-type base with one exponent is a table of 65,536 results.  A cached table serves
# calls from TABLE_USE_MIN elements on: its lookups run on the pool, and below that the
# calling thread's direct kernel is faster than a launch (float16 ** 3.7, direct / table,
# medians on the machine above, idle: 2,048 elements 11 / 54 us, 8,192 35 / 49 us, 16,384
# 64 / 49 us; the table's times swing with how fast the pool wakes).  A table is built once
# a call, or the calls since the last build with that exponent, reach TABLE_BUILD_MIN
# elements: building costs the direct kernel over 65,536 elements.
TABLE_BUILD_MIN = 65536
TABLE_USE_MIN = 16384

# --- Memory: the result pool (runtime/memory.py) -----------------------------------------------
# From glibc's largest mmap threshold on (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit Linux), every
# allocation is a new mapping whose pages fault in and are zeroed on first write: results this
# large come from the pool.
POOL_MIN_BYTES = 32 * 2**20
