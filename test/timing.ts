// Two kinds of request sent alternately, for the tests that show an attacker cannot tell them
// apart by their answer or their time (login-timing, forgot-timing).
import type { LightMyRequestResponse } from 'fastify'

export interface AlternateTimings {
  /** Every answer of either kind, as `status body`. */
  answers: Set<string>
  /** The median time of each kind, in milliseconds. */
  medians: [number, number]
}

const median = (xs: number[]): number => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

/** Sends `first` then `second`, `tries` times each; `pauseMs` after each lets trailing work settle. */
export async function timeAlternately (tries: number, first: () => Promise<LightMyRequestResponse>, second: () => Promise<LightMyRequestResponse>, pauseMs = 0): Promise<AlternateTimings> {
  const answers = new Set<string>()
  const times: [number[], number[]] = [[], []]
  for (let i = 0; i < tries; i++) {
    for (const [kind, send] of [first, second].entries()) {
      const started = process.hrtime.bigint()
      const res = await send()
      times[kind]!.push(Number(process.hrtime.bigint() - started) / 1e6)
      answers.add(`${res.statusCode} ${res.body}`)
      if (pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs))
    }
  }
  return { answers, medians: [median(times[0]), median(times[1])] }
}
