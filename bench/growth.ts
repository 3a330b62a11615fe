// The growth series: GET /tasks for one user with a page of tasks while the table grows
// (--quick: 10k, 100k; else up to 1M), then users with 10 and 10,000 tasks, each with the
// EXPLAIN ANALYZE of the statement's generic plan.
import type { Bench } from './context.js'
import { describe, log, step } from './log.js'
import { addTasks, addUserTasks, analyze, clearTasks, countTasks, explainList, GROWTH_USER_TASKS, SPECIAL } from './seed.js'

export async function runGrowth ({ options, service, runs, accounts, requests, report }: Bench): Promise<void> {
  const { settings } = options
  step(`growth: GET /tasks for one user while the table holds ${settings.growth.map((n) => n.toLocaleString('en')).join(', ')} tasks; then users with 10 and 10,000 tasks`)
  const point = async (label: string, email: string, total: number, userTasks: number) => {
    const m = await runs.stable(label, async () => {
      const r = await runs.measure(label, [requests.listTasks('', [accounts.token(email)])])
      describe(label, r)
      return r
    }, (r) => r.others)
    report.growth.push({ totalTasks: total, userTasks, p50: m.result.p50, p99: m.result.p99 })
    report.row(`growth: ${label}`, { ...m.result, cpuUs: m.cpuUs }, m.rssMB, m.eventLoop?.p99 ?? null, '', null, m.others)
    report.errors += m.result.errors
  }
  const showPlan = (plan: string) => log(plan.split('\n').map((line) => `    | ${line}`).join('\n'))
  let planShown = false
  await service.withSql(async (sql) => { await clearTasks(sql) })
  for (const target of settings.growth) {
    const t = Date.now()
    const { total, plan } = await service.withSql(async (sql) => {
      const have = await countTasks(sql)
      // The growth user's page of tasks is spread through the first 10k rows.
      await addTasks(sql, target - have, settings.users, have === 0 ? { email: SPECIAL.growth, count: GROWTH_USER_TASKS } : undefined)
      await analyze(sql)
      return { total: await countTasks(sql), plan: await explainList(sql, accounts.idOf(SPECIAL.growth)) }
    })
    log(`  ${total.toLocaleString('en')} tasks in the table (filled in ${((Date.now() - t) / 1000).toFixed(1)} s)`)
    if (!planShown || target === settings.growth.at(-1)) {
      showPlan(plan)
      planShown = true
    }
    await point(`${total.toLocaleString('en')} total, user has ${GROWTH_USER_TASKS}`, SPECIAL.growth, total, GROWTH_USER_TASKS)
  }
  const { total, plan } = await service.withSql(async (sql) => {
    await addUserTasks(sql, SPECIAL.small, 10)
    await addUserTasks(sql, SPECIAL.large, 10_000)
    await analyze(sql)
    return { total: await countTasks(sql), plan: await explainList(sql, accounts.idOf(SPECIAL.large)) }
  })
  log('  the user with 10,000 tasks:')
  showPlan(plan)
  await point(`${total.toLocaleString('en')} total, user has 10`, SPECIAL.small, total, 10)
  await point(`${total.toLocaleString('en')} total, user has 10,000`, SPECIAL.large, total, 10_000)
}
