/**
 * What the CDC tests share: waiting for a condition of the engines, and dropping a replication slot at the end.
 */
import { query } from "./database.js"
import { sleep } from "./leftovers.js"

/** Polls `check` until it holds; rejects with `what` after `timeoutMs`. */
export const eventually = async (what: string, check: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> => {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`)
    await sleep(200)
  }
}

/** Drops a replication slot once its walsender is gone (ended, or terminated after 30 s). */
export const dropSlot = async (url: string, slot: string): Promise<void> => {
  const state = () =>
    query<{ active: boolean; pid: number | null }>(
      url,
      "SELECT active, active_pid AS pid FROM pg_replication_slots WHERE slot_name = $1",
      [slot]
    )
  await eventually(`slot ${slot} released`, async () => (await state()).every((row) => !row.active), 30_000)
    .catch(() =>
      query(url, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1", [slot])
    )
  await eventually(`slot ${slot} released`, async () => (await state()).every((row) => !row.active), 30_000)
  await query(url, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", [slot])
}
