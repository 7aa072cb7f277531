/**
 * Options read from configuration where every field may be absent: an absent field is left out of the result
 * (never set to `undefined`), so the options keep their defaults under `exactOptionalPropertyTypes`.
 *
 * @internal
 */
import * as Config from "effect/Config"
import * as Option from "effect/Option"

/** @internal */
export const optionalFields = <const Fields extends Record<string, Config.Config<any>>>(
  fields: Fields
): Config.Config<{ [K in keyof Fields]?: Config.Config.Success<Fields[K]> }> =>
  Config.map(
    Config.all(Object.fromEntries(Object.entries(fields).map(([key, field]) => [key, Config.option(field)]))),
    (values) => {
      const options: Record<string, unknown> = {}
      for (const [key, value] of Object.entries(values as Record<string, Option.Option<unknown>>)) {
        if (Option.isSome(value)) options[key] = value.value
      }
      return options as { [K in keyof Fields]?: Config.Config.Success<Fields[K]> }
    }
  )
