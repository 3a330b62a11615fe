// Stripe's error answers: the status, `{ error: { type, code, param, message, doc_url,
// request_log_url } }` body, and the few invalid-request errors the stand-in raises.
type Obj = Record<string, any>

export class ApiError extends Error {
  constructor (
    readonly status: number,
    readonly type: string,
    message: string,
    readonly extra: { code?: string, param?: string } = {}
  ) {
    super(message)
  }

  body (requestId: string): Obj {
    const error: Obj = { type: this.type, message: this.message }
    if (this.extra.code) {
      error.code = this.extra.code
      error.doc_url = `https://stripe.com/docs/error-codes/${this.extra.code.replaceAll('_', '-')}`
    }
    if (this.extra.param) error.param = this.extra.param
    error.request_log_url = `https://dashboard.stripe.com/test/logs/${requestId}`
    return { error }
  }
}

export const missingParam = (param: string) =>
  new ApiError(400, 'invalid_request_error', `Missing required param: ${param}.`, { code: 'parameter_missing', param })
export const noSuch = (kind: string, id: string, param = 'id', status = 404) =>
  new ApiError(status, 'invalid_request_error', `No such ${kind}: '${id}'`, { code: 'resource_missing', param })
export const invalid = (message: string, param?: string) =>
  new ApiError(400, 'invalid_request_error', message, param ? { param } : {})
