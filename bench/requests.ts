// What each scenario sends: the scenario names, in the order they run.
export const SCENARIOS = ['health', 'tasks.list', 'tasks.list.filtered', 'tasks.create', 'tasks.update', 'preferences.get', 'webhook', 'login'] as const
export type ScenarioName = typeof SCENARIOS[number]

export const JSON_HEADERS = { 'content-type': 'application/json' }
export const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
