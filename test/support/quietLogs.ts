// The tests' own processes log only errors: the warnings of steps that fail on purpose (injected faults, a
// receiver that is down) would bury the test report. TEST_LOG_LEVEL=warn (or debug) shows them again.
import { configureLogging, type LogLevelName } from '../../src/log.js';

const LEVELS: readonly LogLevelName[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
const asked = process.env.TEST_LOG_LEVEL;
configureLogging({ level: LEVELS.find((level) => level === asked) ?? 'error', pretty: false });
