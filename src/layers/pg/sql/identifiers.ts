/**
 * Identifier quoting for statements kept as text (the claim call, frozen migrations). Names reach here
 * validated (`Identifier.validateTableName`), so quoting only guards the case of the letters.
 *
 * @internal
 */

/** `schema.name` → `"schema"."name"`, as `@effect/sql-pg` quotes identifiers. @internal */
export const quote = (name: string): string =>
  name.split(".").map((part) => `"${part.replace(/"/g, "\"\"")}"`).join(".")

/** The name of a table's claim function: `<table>_claim`, in the table's schema. @internal */
export const claimFunction = (table: string): string => `${table}_claim`

/** The producers' table of a transport table: each ordering key's next sequence number. @internal */
export const keySequences = (table: string): string => `${table}_key_seq`

/** The workers' table of a transport table: each ordering key with messages, when it is next due, what blocks it. @internal */
export const keyStates = (table: string): string => `${table}_keys`

/** The table of a transport table's waiting workers: producers notify a queue only while one waits on it. @internal */
export const waitingWorkers = (table: string): string => `${table}_waiting`

/**
 * The function of a transport table's wake-up trigger: `<table>_wake`, in the table's schema. Its trigger has the
 * same name, unqualified (a trigger belongs to its table). @internal
 */
export const wakeFunction = (table: string): string => `${table}_wake`

/**
 * The function of a transport table's key-place trigger: `<table>_key_place`, in the table's schema (migration 14).
 * Its trigger has the same name, unqualified. @internal
 */
export const keyPlaceFunction = (table: string): string => `${table}_key_place`

/** The table-wide sequence of ordering-key places (migration 15): `<table>_places`, in the table's schema. @internal */
export const keyPlaces = (table: string): string => `${table}_places`

/**
 * The function of the trigger that deletes a key's sequence row with its workers' row: `<table>_forget_key`, in the
 * table's schema (migration 15). Its trigger, on `<table>_keys`, is `<table>_keys_forget`. @internal
 */
export const forgetKeyFunction = (table: string): string => `${table}_forget_key`
