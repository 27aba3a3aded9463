/** The middle value (the upper one of the two middles for an even count); NaN for no values. */
export const median = (values: readonly number[]): number =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN
