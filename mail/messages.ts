// The account emails, rendered: plain text plus a simple HTML twin, the product name and
// links built from APP_URL. No images, styles from elsewhere, or tracking.

export interface MailContext {
  /** The web client's base URL (APP_URL): links point at its pages. */
  appUrl: string
  product: string
}

export interface RenderedEmail {
  kind: 'welcome' | 'email_verification' | 'password_reset' | 'password_changed' | 'email_changed' | 'welcome_verified' | 'sign_in_method'
  subject: string
  text: string
  html: string
  link: string | null
}

const escapeHtml = (text: string): string =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!)

/** A page of the web client with the token in its query string. */
export const tokenLink = (ctx: MailContext, page: 'reset-password' | 'verify-email', token: string): string =>
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
  'Please confirm that this address is yours. The link is valid for 48 hours.'
], { url: verifyUrl, label: 'Verify your email' })

export const verificationEmail = (ctx: MailContext, verifyUrl: string): RenderedEmail => render(ctx, 'email_verification', 'Verify your email', [
  `Please confirm that this address is yours to use it with ${ctx.product}. The link is valid for 48 hours.`,
  'If you did not ask for this, you can ignore this email.'
], { url: verifyUrl, label: 'Verify your email' })

export const passwordResetEmail = (ctx: MailContext, resetUrl: string): RenderedEmail => render(ctx, 'password_reset', 'Reset your password', [
  'Someone (hopefully you) asked to reset the password of your account. The link is valid for 1 hour and works once.',
  'If you did not ask for this, ignore this email: your password stays as it is.'
], { url: resetUrl, label: 'Choose a new password' })

export const passwordChangedEmail = (ctx: MailContext): RenderedEmail => render(ctx, 'password_changed', 'Your password was changed', [
  `The password of your ${ctx.product} account was just changed, and every other session was signed out.`,
  'If this was not you, reset your password at once and contact support.'
])

export const emailChangedEmail = (ctx: MailContext, newEmail: string): RenderedEmail => render(ctx, 'email_changed', 'Your email address was changed', [
  `The email address of your ${ctx.product} account was changed to ${newEmail}. Messages now go to the new address.`,
  'If this was not you, contact support at once.'
])

/** A welcome for an account whose address its identity provider has verified: nothing to confirm. */
export const welcomeVerifiedEmail = (ctx: MailContext, provider: string): RenderedEmail => render(ctx, 'welcome_verified', `Welcome to ${ctx.product}`, [
  `Welcome to ${ctx.product}. Your account is ready; you signed up with ${provider}.`,
  'If this was not you, contact support at once.'
])

/** A way to sign in was added to the account or removed from it (security notices, docs/sessions.md). */
export const signInMethodEmail = (ctx: MailContext, change: 'added' | 'removed', what: string): RenderedEmail =>
  render(ctx, 'sign_in_method', change === 'added' ? 'A new way to sign in was added' : 'A way to sign in was removed', [
    change === 'added'
      ? `${what} was added to your ${ctx.product} account as a way to sign in.`
      : `${what} was removed from your ${ctx.product} account and no longer signs you in.`,
    'If this was not you, change your password, sign out your other sessions and contact support at once.'
  ])
