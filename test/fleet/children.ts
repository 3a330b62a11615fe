// Every process the fleet test starts is killed when the test process ends, however it ends:
// teardowns do not run when a test process is killed or bails out, and an orphaned instance
// or balancer would keep its port and its load on a shared machine.
import type { ChildProcess } from 'node:child_process'

const children = new Set<ChildProcess>()

process.once('exit', () => {
  for (const child of children) child.kill('SIGKILL')
})

/** Kills `child` when this process exits, unless it has ended by then. */
export function track<T extends ChildProcess> (child: T): T {
  children.add(child)
  child.once('exit', () => children.delete(child))
  return child
}
