// The tests' SMTP server (test/support/smtp-sink.ts) outlives a client that vanishes in the
// middle of a message, as the service does when a test kills it: CI once failed a test after
// every assertion had passed, on that reset left unheard (an uncaught ECONNRESET).
import { connect } from 'node:net'
import { once } from 'node:events'
import nodemailer from 'nodemailer'
import t from 'tap'
import { startSmtpSink } from '../support/smtp-sink.js'

t.test('a client reset in mid-transaction is no crash, and the sink keeps receiving', async (t) => {
  const sink = await startSmtpSink()
  t.teardown(() => sink.close())
  const socket = connect(sink.port, '127.0.0.1')
  await once(socket, 'data')
  socket.write('EHLO test\r\nMAIL FROM:<someone@example.com>\r\n')
  // Both commands answered: the transaction is open.
  let answered = ''
  while (!/\r\n250[ -].*\r\n.*250 /s.test(answered)) answered += String((await once(socket, 'data'))[0])
  socket.resetAndDestroy()
  await once(socket, 'close')
  await new Promise((resolve) => setTimeout(resolve, 100))

  const transport = nodemailer.createTransport({ url: sink.url })
  t.teardown(() => transport.close())
  await transport.sendMail({ from: 'app@example.com', to: 'after@example.com', subject: 'After the reset', text: 'still here' })
  t.match(await sink.waitFor((mail) => mail.to === 'after@example.com', 5000), { subject: 'After the reset' })
})
