/** Where the trace of a piece of work is, for the work it causes later (a webhook delivery after its request). */
export interface TraceContext {
  /** The W3C `traceparent` of the span now active; undefined when nothing is traced. */
  traceparent: () => string | undefined
  /** Runs `work` as part of the trace `traceparent` names (in no trace when it is undefined). */
  within: <T>(traceparent: string | undefined, work: () => T) => T
}
