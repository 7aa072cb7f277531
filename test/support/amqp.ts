import * as Amqp from "amqplib"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { inject } from "vitest"
import * as AmqpTransport from "../../src/layers/amqp/AmqpTransport.js"

/** The URL of the test run's broker, from the global setup. */
export const amqpUrl = (): string => inject("amqpUrl")

let names = 0

/** A unique prefix for one test's exchange and queues (parallel files and runs share the broker). */
export const uniqueName = (prefix = "t") =>
  `${prefix}-${process.pid}-${++names}-${Math.random().toString(36).slice(2, 7)}`

/** Runs a function with a raw amqplib channel on a URL, then closes the connection. */
export const withChannel = async <A>(url: string, f: (channel: Amqp.Channel) => Promise<A>): Promise<A> => {
  const connection = await Amqp.connect(url)
  connection.on("error", () => undefined)
  try {
    const channel = await connection.createChannel()
    channel.on("error", () => undefined)
    return await f(channel)
  } finally {
    await connection.close().catch(() => undefined)
  }
}

/** Runs a function with a raw amqplib confirm channel on a URL (`waitForConfirms` settles its publishes), then closes it. */
export const withConfirmChannel = async <A>(
  url: string,
  f: (channel: Amqp.ConfirmChannel) => Promise<A>
): Promise<A> => {
  const connection = await Amqp.connect(url)
  connection.on("error", () => undefined)
  try {
    const channel = await connection.createConfirmChannel()
    channel.on("error", () => undefined)
    return await f(channel)
  } finally {
    await connection.close().catch(() => undefined)
  }
}

/** Deletes queues and an exchange a test declared (best effort). */
export const cleanup = (url: string, exchange: string, queues: ReadonlyArray<string>) =>
  withChannel(url, async (channel) => {
    for (const queue of queues) await channel.deleteQueue(queue).catch(() => undefined)
    await channel.deleteExchange(exchange).catch(() => undefined)
  }).catch(() => undefined)

/**
 * A TCP proxy to a broker that a test can cut: `cut()` destroys every open connection (a lost network),
 * `hold(true)` stops forwarding the client's bytes (a send stays unconfirmed) until `hold(false)`, and
 * `holding()` resolves once bytes of the client are being held (a publish reached the proxy).
 */
export const startProxy = async (target: string) => {
  const { port, hostname } = new URL(target)
  const sockets = new Set<import("node:net").Socket>()
  let held = false
  const pending: Array<() => void> = []
  const onHeld: Array<() => void> = []
  const net = await import("node:net")
  const server = net.createServer((client) => {
    const upstream = net.connect({ host: hostname, port: Number(port) })
    sockets.add(client)
    sockets.add(upstream)
    client.on("data", (chunk) => {
      if (held) {
        pending.push(() => upstream.write(chunk))
        for (const resolve of onHeld.splice(0)) resolve()
      } else upstream.write(chunk)
    })
    upstream.on("data", (chunk) => client.write(chunk))
    const close = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on("error", close).on("close", close)
    upstream.on("error", close).on("close", close)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const address = server.address() as import("node:net").AddressInfo
  const url = new URL(target)
  url.port = String(address.port)
  return {
    url: url.toString(),
    hold: (on: boolean) => {
      held = on
      if (!on) { for (const f of pending.splice(0)) f() }
    },
    holding: () =>
      new Promise<void>((resolve) => {
        if (pending.length > 0) resolve()
        else onHeld.push(resolve)
      }),
    cut: () => {
      pending.splice(0)
      for (const socket of sockets) socket.destroy()
      sockets.clear()
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      })
  }
}

/**
 * A fresh RabbitMQ transport on its own exchange and queues (`<prefix>.<transport>`), set up unless
 * `setup: false`; its queues and exchange are deleted when the scope closes.
 */
export const freshTransport = (
  transports: Readonly<Record<string, AmqpTransport.TransportOptions>>,
  options: { readonly url?: string; readonly setup?: boolean; readonly claimWait?: Duration.DurationInput } = {}
) =>
  Effect.gen(function*() {
    const prefix = uniqueName("amqp")
    const queues = Object.fromEntries(
      Object.entries(transports).map(([name, o]) => [name, { ...o, queue: `${prefix}.${name}` }])
    )
    yield* Effect.addFinalizer(() =>
      Effect.promise(() => cleanup(amqpUrl(), prefix, Object.values(queues).map((o) => o.queue)))
    )
    const transport = yield* AmqpTransport.make({
      url: options.url ?? amqpUrl(),
      exchange: { name: prefix },
      transports: queues,
      claimWait: options.claimWait ?? "2 seconds"
    })
    if (options.setup !== false) yield* transport.setup
    return { transport, prefix, queue: (name: string) => queues[name]!.queue }
  })
