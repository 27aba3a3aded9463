/** Whether a value parsed from JSON or given in settings is an object of named values (not null, not a list). */
export const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value)
