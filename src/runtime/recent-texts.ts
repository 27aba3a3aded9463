/**
 * Texts by key, holding at most `maxCharacters` of keys and texts together: past it, those kept longest ago go
 * first. A text longer than the whole bound is not kept.
 */
export class RecentTexts {
  readonly #texts = new Map<string, string>()
  readonly #maxCharacters: number
  #characters = 0

  constructor (maxCharacters: number) {
    this.#maxCharacters = maxCharacters
  }

  get (key: string): string | undefined {
    return this.#texts.get(key)
  }

  /** Whatever `key` held: the text it holds now (undefined: none). */
  set (key: string, text: string | undefined): void {
    const kept = this.#texts.get(key)
    if (kept !== undefined) {
      this.#texts.delete(key)
      this.#characters -= key.length + kept.length
    }
    if (text === undefined || key.length + text.length > this.#maxCharacters) return
    this.#texts.set(key, text)
    this.#characters += key.length + text.length
    // The text just kept, last, fits the bound alone: the loop ends before it.
    const oldestFirst = this.#texts.entries()
    while (this.#characters > this.#maxCharacters) {
      const [oldest, oldText] = oldestFirst.next().value!
      this.#texts.delete(oldest)
      this.#characters -= oldest.length + oldText.length
    }
  }
}
