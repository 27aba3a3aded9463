/**
 * Keys by the weight each holds, the heaviest at hand: a binary max-heap that knows each key's place in it, so that
 * a weight changes in O(log n). Hand-written: the priority queues on npm cannot change an entry's weight in place.
 */
export class HeaviestFirst<K> {
  readonly #heap: K[] = []
  readonly #places = new Map<K, number>()
  readonly #weights = new Map<K, number>()

  /** The key that holds the most; undefined when none holds anything. */
  heaviest (): K | undefined {
    return this.#heap[0]
  }

  /** Adds `delta` (negative to take away) to what `key` holds; a key left with nothing leaves the heap. */
  add (key: K, delta: number): void {
    const weight = (this.#weights.get(key) ?? 0) + delta
    const place = this.#places.get(key)
    if (weight <= 0) {
      if (place !== undefined) this.#remove(key, place)
      return
    }
    this.#weights.set(key, weight)
    if (place === undefined) {
      this.#heap.push(key)
      this.#places.set(key, this.#heap.length - 1)
      this.#up(this.#heap.length - 1)
    } else if (delta > 0) {
      this.#up(place)
    } else {
      this.#down(place)
    }
  }

  #remove (key: K, place: number): void {
    const last = this.#heap.pop()!
    this.#places.delete(key)
    this.#weights.delete(key)
    if (last === key) return
    this.#heap[place] = last
    this.#places.set(last, place)
    this.#up(place)
    this.#down(this.#places.get(last)!)
  }

  #weightAt (place: number): number {
    return this.#weights.get(this.#heap[place]!)!
  }

  #swap (a: number, b: number): void {
    const keyA = this.#heap[a]!
    const keyB = this.#heap[b]!
    this.#heap[a] = keyB
    this.#heap[b] = keyA
    this.#places.set(keyB, a)
    this.#places.set(keyA, b)
  }

  #up (place: number): void {
    let child = place
    while (child > 0) {
      const parent = (child - 1) >> 1
      if (this.#weightAt(parent) >= this.#weightAt(child)) return
      this.#swap(parent, child)
      child = parent
    }
  }

  #down (place: number): void {
    let parent = place
    for (;;) {
      const left = 2 * parent + 1
      const right = left + 1
      let largest = parent
      if (left < this.#heap.length && this.#weightAt(left) > this.#weightAt(largest)) largest = left
      if (right < this.#heap.length && this.#weightAt(right) > this.#weightAt(largest)) largest = right
      if (largest === parent) return
      this.#swap(parent, largest)
      parent = largest
    }
  }
}
