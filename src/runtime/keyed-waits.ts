/** One caller's wait on a key: each `changed()` settles at the key's next change, or when the waits end. */
export interface Wait {
  /** Settles at the next change of the key after this call (ask before reading, so that no change is missed). */
  changed: () => Promise<void>
  /** Whether the waits have ended (the process is closing): what is read then is answered at once. */
  ended: () => boolean
  /** Ends the wait: once, when its caller is done with it. */
  release: () => void
}

function settled (): { promise: Promise<void>, settle: () => void } {
  let settle!: () => void
  const promise = new Promise<void>((resolve) => { settle = resolve })
  return { promise, settle }
}

/**
 * Callers waiting for what a key names to change, bounded: at most `perKey` held at once on one key and `inAll` on
 * every key together, so that no caller, nor all of them, holds more. A change is told by `changed(key)`; the empty
 * key tells of every key (one may have changed unheard of).
 */
export class KeyedWaits {
  readonly #byKey = new Map<string, Set<() => void>>()
  #held = 0
  #ended = false

  constructor (readonly perKey: number, readonly inAll: number) {}

  /** How many are held now. */
  get held (): number {
    return this.#held
  }

  /** A wait on `key`, or which bound refuses one more. */
  hold (key: string): Wait | 'per key' | 'in all' {
    const waiting = this.#byKey.get(key) ?? new Set<() => void>()
    if (waiting.size >= this.perKey) return 'per key'
    if (this.#held >= this.inAll) return 'in all'
    this.#byKey.set(key, waiting)
    this.#held += 1
    let next: { promise: Promise<void>, settle: () => void } | undefined
    const settle = (): void => {
      next?.settle()
      next = undefined
    }
    waiting.add(settle)
    return {
      changed: () => {
        if (this.#ended) return Promise.resolve()
        next ??= settled()
        return next.promise
      },
      ended: () => this.#ended,
      release: () => {
        this.#held -= 1
        waiting.delete(settle)
        if (waiting.size === 0) this.#byKey.delete(key)
      }
    }
  }

  changed (key: string): void {
    if (key === '') {
      for (const waiting of this.#byKey.values()) for (const settle of waiting) settle()
      return
    }
    for (const settle of this.#byKey.get(key) ?? []) settle()
  }

  /** Ends every wait, now and from now on. */
  end (): void {
    this.#ended = true
    this.changed('')
  }
}
