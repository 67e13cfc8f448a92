// A Dagster asset's partition keys, from the corrected hours. Dagster names a time partition by formatting its
// start with the partitions definition's `fmt` (Python's strftime: HourlyPartitionsDefinition's default is
// "%Y-%m-%d-%H:%M", DailyPartitionsDefinition's "%Y-%m-%d") in the definition's timezone. The bot's hours are UTC
// instants, so a key sent as an ISO hour names no partition. Only the directives a time partition key uses are
// known here; any other is refused when the catalog is checked rather than sent to Dagster as text.

const DIRECTIVE = /%(.)/g;
const KNOWN = new Set(['Y', 'm', 'd', 'H', 'M', 'S', 'z', '%']);

/** Why `format` cannot be used, or undefined when every directive in it is one this formatter knows. */
export function partitionFormatProblem(format: string): string | undefined {
  if (/%$/.test(format.replace(/%%/g, ''))) return 'ends with a lone "%": write "%%" for a percent sign';
  const unknown = [...format.matchAll(DIRECTIVE)].map((match) => match[1] ?? '').filter((directive) => !KNOWN.has(directive));
  if (unknown.length > 0) {
    return `uses ${[...new Set(unknown)].map((d) => `%${d}`).join(', ')}; a partition key format may use %Y %m %d %H %M %S %z and %% (e.g. "%Y-%m-%d-%H:%M")`;
  }
  return undefined;
}

/** Whether Intl knows the IANA time zone name (UTC, Europe/Berlin). */
export function isTimeZone(name: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

interface WallClock {
  Y: number;
  m: number;
  d: number;
  H: number;
  M: number;
  S: number;
  /** Minutes east of UTC at that instant. */
  offset: number;
}

/** The wall-clock time at `instant` in `timeZone`, with that zone's offset then. */
function wallClock(instant: Date, timeZone: string): WallClock {
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit',
  }).formatToParts(instant);
  const part = (type: Intl.DateTimeFormatPartTypes) => Number(parts.find((p) => p.type === type)?.value ?? 0);
  const clock = { Y: part('year'), m: part('month'), d: part('day'), H: part('hour'), M: part('minute'), S: part('second') };
  // The offset is what the wall clock, read as if it were UTC, is ahead of the instant (whole seconds dropped).
  const asUtc = Date.UTC(clock.Y, clock.m - 1, clock.d, clock.H, clock.M, clock.S);
  const offset = Math.round((asUtc - Math.floor(instant.getTime() / 1000) * 1000) / 60_000);
  return { ...clock, offset };
}

const pad = (value: number, width = 2) => String(value).padStart(width, '0');

/** One partition key: `format`'s directives filled from the hour's wall-clock time in `timeZone`. */
function partitionKey(hour: Date, format: string, timeZone = 'UTC'): string {
  const clock = wallClock(hour, timeZone);
  return format.replace(DIRECTIVE, (match, directive: string) => {
    switch (directive) {
      case 'Y': return pad(clock.Y, 4);
      case 'm': return pad(clock.m);
      case 'd': return pad(clock.d);
      case 'H': return pad(clock.H);
      case 'M': return pad(clock.M);
      case 'S': return pad(clock.S);
      case 'z': return `${clock.offset < 0 ? '-' : '+'}${pad(Math.floor(Math.abs(clock.offset) / 60))}${pad(Math.abs(clock.offset) % 60)}`;
      case '%': return '%';
      default: return match; // partitionFormatProblem refused it when the catalog was checked
    }
  });
}

/**
 * The keys of the partitions the hours fall in, each once, in the hours' order: six hours of a daily asset are
 * one key ("%Y-%m-%d"), not six requests for the same partition.
 */
export function partitionKeys(hours: readonly Date[], format: string, timeZone = 'UTC'): string[] {
  return [...new Set(hours.map((hour) => partitionKey(hour, format, timeZone)))];
}
