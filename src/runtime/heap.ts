import { getHeapStatistics } from 'node:v8'

// V8's heap limit counts the young generation too, which a small --max-old-space-size makes a large part of it
// (docs/operations.md): set MAX_HEAP_USED_MIB for such a heap.
const HEAP_SHARE_BEFORE_SHEDDING = 0.6

/** Heap in use past which writes are shed: `maxHeapUsedBytes` when set, else a share of the heap V8 may grow to. */
export const heapUsedLimit = (maxHeapUsedBytes: number | undefined): number =>
  maxHeapUsedBytes ?? Math.round(getHeapStatistics().heap_size_limit * HEAP_SHARE_BEFORE_SHEDDING)
