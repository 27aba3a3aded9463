import t from 'tap'
import { createMemoryStore } from '../../src/store/memory-store.js'
import { storeConformance } from './conformance.js'

storeConformance(t, async (_t, options) => createMemoryStore(options))
