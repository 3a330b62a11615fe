// The account emails, rendered: plain text plus a simple HTML twin, the product name and
// links built from APP_URL. No images, styles from elsewhere, or tracking.

export interface MailContext {
  /** The web client's base URL (APP_URL): links point at its pages. */
  appUrl: string
  product: string
  /** Display names of the identity providers by id (OIDC_<ID>_NAME); an id not here is shown as it is. */
  providerNames?: ReadonlyMap<string, string>
}

export interface RenderedEmail {
  kind: 'welcome' | 'email_verification' | 'password_reset' | 'password_changed' | 'email_changed' | 'email_change_requested' | 'welcome_verified' |
  'sign_in_method' | 'second_factor' | 'api_key' | 'device_link' | 'security_digest'
  subject: string
  text: string
  html: string
  link: string | null
}

const escapeHtml = (text: string): string =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!)

/** A page of the web client with the token in its query string. */
export const tokenLink = (ctx: MailContext, page: 'reset-password' | 'verify-email' | 'trust-device', token: string): string =>
  `${ctx.appUrl.replace(/\/+$/, '')}/${page}?token=${encodeURIComponent(token)}`

function render (ctx: MailContext, kind: RenderedEmail['kind'], subject: string, paragraphs: string[], link?: { url: string, label: string }): RenderedEmail {
  const text = [
    ...paragraphs.flatMap((p) => [p, '']),
    ...(link ? [`${link.label}: ${link.url}`, ''] : []),
    `— ${ctx.product}`
  ].join('\n')
  const html = [
    '<!doctype html>',
    `<html><head><meta charset="utf-8"><title>${escapeHtml(subject)}</title></head><body>`,
    ...paragraphs.map((p) => `<p>${escapeHtml(p)}</p>`),
    ...(link ? [`<p><a href="${escapeHtml(link.url)}">${escapeHtml(link.label)}</a></p>`, `<p>${escapeHtml(link.url)}</p>`] : []),
    `<p>— ${escapeHtml(ctx.product)}</p>`,
    '</body></html>'
  ].join('\n')
  return { kind, subject: `${subject} - ${ctx.product}`.slice(0, 255), text, html, link: link?.url ?? null }
}

export const welcomeEmail = (ctx: MailContext, verifyUrl: string): RenderedEmail => render(ctx, 'welcome', 'Welcome! Please verify your email', [
  `Welcome to ${ctx.product}. Your account is ready.`,
  'Please confirm that this address is yours. The link is valid for 48 hours.',
  // Someone else may have registered this address to wait for its owner: a confirmation would
  // let them add a way in (accounts/new-way-in.ts).
  'If you did not create this account, do not follow the link: someone else used your address. Ignore this email, ' +
  'or take the account over with "Forgot password", which signs every session out.'
], { url: verifyUrl, label: 'Verify your email' })

export const verificationEmail = (ctx: MailContext, verifyUrl: string): RenderedEmail => render(ctx, 'email_verification', 'Verify your email', [
  `Please confirm that this address is yours to use it with ${ctx.product}. The link is valid for 48 hours.`,
  'If you did not ask for this, you can ignore this email.'
], { url: verifyUrl, label: 'Verify your email' })

const providerName = (ctx: MailContext, id: string): string => ctx.providerNames?.get(id) ?? id

/** "Google and Okta": the providers by display name, each once, in the order given. */
function providerList (ctx: MailContext, providers: readonly string[]): string {
  const names = [...new Set(providers.map((id) => providerName(ctx, id)))]
  return names.length <= 1 ? names.join('') : `${names.slice(0, -1).join(', ')} and ${names.at(-1)!}`
}

/** A paragraph naming the providers that still sign in to the account, when there are any. */
const stillLinked = (ctx: MailContext, providers: readonly string[], when: string): string[] => providers.length === 0
  ? []
  : [`${when} sign-in with ${providerList(ctx, providers)} still opens this account. If that is not yours, remove it under your account's sign-in methods.`]

/** `providers`: those a reset keeps (linked under this address), named so an owner sees a way in that is not theirs. */
export const passwordResetEmail = (ctx: MailContext, resetUrl: string, providers: readonly string[] = []): RenderedEmail =>
  render(ctx, 'password_reset', 'Reset your password', [
    'Someone (hopefully you) asked to reset the password of your account. The link is valid for 1 hour and works once.',
    ...stillLinked(ctx, providers, 'After the reset,'),
    'If you did not ask for this, ignore this email: your password stays as it is.'
  ], { url: resetUrl, label: 'Choose a new password' })

/** `providers`: the identity providers still linked to the account after the change. */
export const passwordChangedEmail = (ctx: MailContext, providers: readonly string[] = []): RenderedEmail =>
  render(ctx, 'password_changed', 'Your password was changed', [
    `The password of your ${ctx.product} account was just changed, and every other session was signed out.`,
    ...stillLinked(ctx, providers, 'Besides the password,'),
    'If this was not you, reset your password at once and contact support.'
  ])

/** To the old address, once the new one confirmed the change; `removed`: the providers unlinked by it. */
export const emailChangedEmail = (ctx: MailContext, newEmail: string, removed: readonly string[] = []): RenderedEmail =>
  render(ctx, 'email_changed', 'Your email address was changed', [
    `The email address of your ${ctx.product} account was changed to ${newEmail}, which confirmed it. Messages now go to the new address.`,
    ...(removed.length === 0 ? [] : [`Sign-in with ${providerList(ctx, removed)} was removed from the account with the change: link it again if you want it.`]),
    'If this was not you, contact support at once.'
  ])

/** To the current address: a change was asked for, and waits for the new address to confirm it. */
export const emailChangeRequestedEmail = (ctx: MailContext, newEmail: string): RenderedEmail =>
  render(ctx, 'email_change_requested', 'A change of your email address was requested', [
    `Someone signed in to your ${ctx.product} account asked to change its email address to ${newEmail}.`,
    'Nothing changes until that address confirms it; until then this address keeps signing in and receiving our messages.',
    'If this was not you, reset your password now: that cancels the change and signs out every session.'
  ])

/** The way past a sign-in lock that an attacker cannot block: it marks the device that follows it as the owner's. */
export const deviceLinkEmail = (ctx: MailContext, url: string): RenderedEmail => render(ctx, 'device_link', 'Sign in from this device', [
  `Sign-ins to your ${ctx.product} account are paused after many wrong passwords. Open this link on the device you want to sign in from, then sign in with your password as usual. The link is valid for 1 hour and works once.`,
  'If you did not ask for this, ignore this email; someone may be guessing your password, and it stays safe as long as it is strong.'
], { url, label: 'Sign in from this device' })

/** Security notices held back past the address's hourly cap, sent together once the hour ended. */
export const securityDigestEmail = (ctx: MailContext, notices: ReadonlyArray<{ subject: string, text: string }>): RenderedEmail =>
  render(ctx, 'security_digest', notices.length === 1 ? 'A security notice for your account' : `${notices.length} security notices for your account`, [
    `We sent this address many messages in one hour, so these notices about your ${ctx.product} account were held back and come together:`,
    ...notices.map((notice, i) => `${i + 1}. ${notice.subject}\n${notice.text.replace(/\n*— .*$/s, '').trim()}`)
  ])

/** A welcome for an account whose address its identity provider has verified: nothing to confirm. */
export const welcomeVerifiedEmail = (ctx: MailContext, provider: string): RenderedEmail => render(ctx, 'welcome_verified', `Welcome to ${ctx.product}`, [
  `Welcome to ${ctx.product}. Your account is ready; you signed up with ${provider}.`,
  'If this was not you, contact support at once.'
])

/** What happened to the account's second factor, beside it being turned on or off (signInMethodEmail). */
export type SecondFactorEvent = 'recovery-codes' | 'recovery-code-used' | 'suspended'

export function secondFactorEmail (ctx: MailContext, event: SecondFactorEvent, recoveryCodesLeft = 0): RenderedEmail {
  const notYou = 'If this was not you, change your password, sign out your other sessions and contact support at once.'
  switch (event) {
    case 'recovery-codes':
      return render(ctx, 'second_factor', 'New recovery codes were made', [
        `New recovery codes were made for your ${ctx.product} account; the ones you had before no longer work.`, notYou
      ])
    case 'recovery-code-used':
      return render(ctx, 'second_factor', 'A recovery code was used to sign in', [
        `A recovery code was used to sign in to your ${ctx.product} account. ` +
          (recoveryCodesLeft === 1 ? 'You have 1 left.' : `You have ${recoveryCodesLeft} left.`) +
          (recoveryCodesLeft <= 3 ? ' Make new ones in your account\'s security settings.' : ''),
        notYou
      ])
    case 'suspended':
      return render(ctx, 'second_factor', 'Two-step sign-in paused after wrong codes', [
        `Someone typed ten wrong two-step codes in a row for your ${ctx.product} account, so its codes are not checked for the next 15 minutes.`,
        'Whoever did it knew your password: if it was not you, change your password now.'
      ])
  }
}

/** A way to sign in was added to the account or removed from it (security notices, docs/sessions.md). */
export const signInMethodEmail = (ctx: MailContext, change: 'added' | 'removed', what: string): RenderedEmail =>
  render(ctx, 'sign_in_method', change === 'added' ? 'A new way to sign in was added' : 'A way to sign in was removed', [
    change === 'added'
      ? `${what} was added to your ${ctx.product} account as a way to sign in.`
      : `${what} was removed from your ${ctx.product} account and no longer signs you in.`,
    'If this was not you, change your password, sign out your other sessions and contact support at once.'
  ])

/** What happened to an API key (docs/api-keys.md). */
export type ApiKeyEvent = 'created' | 'rotated' | 'revoked' | 'reported' | 'revoked-by-reset'

/**
 * A notice about an API key, named by its name and prefix (never the key). `count`: the keys a
 * password reset revoked.
 */
export function apiKeyEmail (ctx: MailContext, event: ApiKeyEvent, key: { name: string, prefix: string }, count = 0): RenderedEmail {
  const named = `The API key "${key.name}" (tsk_${key.prefix}…)`
  const notYou = 'If this was not you, revoke your API keys, change your password and sign out your other sessions.'
  switch (event) {
    case 'created':
      return render(ctx, 'api_key', 'A new API key was created', [`${named} was created for your ${ctx.product} account.`, notYou])
    case 'rotated':
      return render(ctx, 'api_key', 'An API key was rotated', [
        `${named} of your ${ctx.product} account was replaced by a new key; it stops working at the end of the grace period chosen.`, notYou
      ])
    case 'revoked':
      return render(ctx, 'api_key', 'An API key was revoked', [`${named} of your ${ctx.product} account was revoked and no longer works.`, notYou])
    case 'reported':
      return render(ctx, 'api_key', 'An API key was found exposed and revoked', [
        `Someone reported ${named} of your ${ctx.product} account as exposed (for example in public code), so it was revoked and no longer works.`,
        'Make a new key for whatever used it, and keep it out of code and logs others can read.'
      ])
    case 'revoked-by-reset':
      return render(ctx, 'api_key', 'Your API keys were revoked', [
        `The password of your ${ctx.product} account was reset, so its ${count === 1 ? 'API key was' : `${count} API keys were`} revoked: ` +
          'whoever could sign in before the reset may have made them. Make new keys for the scripts you still use.'
      ])
  }
}
