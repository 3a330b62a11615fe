// Two kinds of request sent alternately, for the tests that show an attacker cannot tell them
// apart by their answer or their time (login-timing, forgot-timing).
import type { LightMyRequestResponse } from 'fastify'

export interface AlternateTimings {
  /** Every answer of either kind, as `status body`. */
  answers: Set<string>
  /** The median time of each kind, in milliseconds. */
  medians: [number, number]
}

const quantile = (xs: number[], q: number): number => xs.sort((a, b) => a - b)[Math.floor(xs.length * q)]!
const median = (xs: number[]): number => quantile(xs, 0.5)

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

/**
 * The request `next`, timed when sent right after each answer of `first` and `second` (sent
 * alternately, `tries` times each): on the next turn of the event loop, where a real server's
 * next request lands, after any work begun in the answer's wake. Lower quartiles (what a busy
 * machine adds lands in a few tries of either kind: see cpuAfterAlternately), in milliseconds.
 */
export async function timeNextAlternately (tries: number, first: () => Promise<unknown>, second: () => Promise<unknown>, next: () => Promise<unknown>, pauseMs = 0): Promise<[number, number]> {
  const times: [number[], number[]] = [[], []]
  for (let i = 0; i < tries; i++) {
    for (const [kind, send] of [first, second].entries()) {
      await send()
      await new Promise((resolve) => setImmediate(resolve))
      const started = process.hrtime.bigint()
      await next()
      times[kind]!.push(Number(process.hrtime.bigint() - started) / 1e6)
      if (pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs))
    }
  }
  return [quantile(times[0], 0.25), quantile(times[1], 0.25)]
}

/**
 * The CPU time the whole process (its threads included) spends in the `windowMs` after each
 * answer of `first` and `second` (sent alternately, `tries` times each, `pauseMs` apart). CPU
 * time, unlike wall time, leaves out the waits of a busy machine; what else the process does
 * meanwhile (its collector, a test's other work) lands in a few windows of either kind, so the
 * lower quartiles are compared: what each costs at least. In milliseconds.
 */
export async function cpuAfterAlternately (tries: number, first: () => Promise<unknown>, second: () => Promise<unknown>, windowMs: number, pauseMs: number): Promise<[number, number]> {
  const times: [number[], number[]] = [[], []]
  for (let i = 0; i < tries; i++) {
    for (const [kind, send] of [first, second].entries()) {
      await send()
      const cpu = process.cpuUsage()
      await new Promise((resolve) => setTimeout(resolve, windowMs))
      const used = process.cpuUsage(cpu)
      times[kind]!.push((used.user + used.system) / 1000)
      await new Promise((resolve) => setTimeout(resolve, pauseMs))
    }
  }
  return [quantile(times[0], 0.25), quantile(times[1], 0.25)]
}
