/**
 * Runs the tasks given one key one after another, in the order they came; tasks of different keys run freely. A
 * key is held only while a task of it is in flight, so the map is no larger than the tasks under way.
 */
export class PerKeyQueue {
  // The settling of each key's last task: the next one of that key starts after it.
  readonly #tails = new Map<string, Promise<void>>()

  async run<T> (key: string, task: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(key)
    const result = previous === undefined ? task() : previous.then(task)
    const tail = result.then(settled, settled)
    this.#tails.set(key, tail)
    try {
      return await result
    } finally {
      if (this.#tails.get(key) === tail) this.#tails.delete(key)
    }
  }
}

const settled = (): void => {}
