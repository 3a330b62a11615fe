// What to undo when the benchmark ends, however it ends (done, failed, Ctrl-C): child
// processes, the benchmark database, temporary directories; the last added goes first.
export class CleanUps {
  private readonly steps: Array<() => Promise<void> | void> = []
  private interrupted = false

  add (step: () => Promise<void> | void): void {
    this.steps.push(step)
  }

  /** Runs every step added so far, newest first; a failing step is reported, not fatal. */
  async run (): Promise<void> {
    while (this.steps.length > 0) {
      try { await this.steps.pop()!() } catch (err) { console.error('clean-up:', (err as Error).message) }
    }
  }

  /** SIGINT and SIGTERM clean up, then exit 130; a second signal exits at once. */
  onSignals (): void {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      process.on(signal, () => {
        if (this.interrupted) process.exit(130)
        this.interrupted = true
        console.error(`\n${signal}: stopping child processes and dropping the benchmark database…`)
        this.run().finally(() => process.exit(130))
      })
    }
  }
}
