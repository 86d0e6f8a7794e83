// The tinybox TypeScript SDK against a live `tinybox serve`
// (TINYBOX_API_URL / TINYBOX_API_TOKEN; tests/tests/sdk_typescript.rs
// starts one, compiles this with tsc and runs it with `node --test`).
// TINYBOX_TEST_SANDBOX names the sandbox the server makes boxes on.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  AuthenticationError,
  InvalidRequestError,
  NotFoundError,
  Sandbox,
  TinyboxError,
  UnsupportedError,
} from '../src/index.js';

const inBox = (box: Sandbox, name: string): string => `${(box.workdir ?? '').replace(/\/+$/, '')}/${name}`;
const bytes = (...parts: (number[] | string)[]): Uint8Array =>
  new Uint8Array(Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p)))));
const ids = async (): Promise<string[]> => (await Sandbox.list()).map((b) => b.id);

describe('a box', () => {
  let box: Sandbox;
  before(async () => {
    box = await Sandbox.create({ memory: '256M', ttlSecs: 600 });
  });
  after(async () => {
    await box.kill();
  });

  test('says what confines it', async () => {
    assert.match(box.id, /^box-/);
    assert.equal(box.sandbox, process.env.TINYBOX_TEST_SANDBOX);
    assert.ok(['process', 'kernel', 'hardware'].includes(box.isolation ?? ''), String(box.isolation));
    assert.equal(typeof box.verified, 'boolean');
    assert.equal(box.suitableForUntrustedCode, box.raw.suitable_for_untrusted_code);
    assert.equal(box.limits.memory_bytes, 256 << 20, JSON.stringify(box.limits));
    assert.deepEqual(box.network, box.raw.network);
    assert.notEqual(box.network, undefined);
    const again = await Sandbox.connect(box.id);
    assert.deepEqual([again.id, again.isolation, again.limits], [box.id, box.isolation, box.limits]);
    assert.equal(again.state, 'ready');
    assert.equal((await box.refresh()).state, 'ready');
    assert.ok((await ids()).includes(box.id));
  });

  test("a command's output and exit code", async () => {
    let r = await box.commands.run('echo out; echo err >&2; exit 3');
    assert.deepEqual([r.exitCode, r.stdout, r.stderr, r.ok], [3, 'out\n', 'err\n', false]);
    r = await box.exec(['printf', '%s|', 'a b', '$HOME']);
    assert.deepEqual([r.exitCode, r.stdout], [0, 'a b|$HOME|'], 'an argv runs with no shell');
    r = await box.commands.run('printf %s "$GREETING"; pwd', { envs: { GREETING: 'hello' }, cwd: '/' });
    assert.equal(r.stdout, 'hello/\n');
    r = await box.commands.run(['cat'], { stdin: bytes([0], 'in', [0xff]) });
    assert.deepEqual(r.stdoutBytes, bytes([0], 'in', [0xff]));
    r = await box.commands.run("printf '\\377\\000'");
    assert.deepEqual(r.stdoutBytes, bytes([0xff, 0]), 'output that is not UTF-8 comes back as its bytes');
  });

  test('files are binary-safe', async () => {
    const blob = bytes([...Array(256).keys()], [0, 0xff, 0xfe, 0x0a, 0]);
    const path = inBox(box, 'blob.bin');
    assert.equal((await box.files.write(path, blob, { mode: 0o600 })).bytes, blob.length);
    assert.deepEqual(await box.files.read(path, { format: 'bytes' }), blob);
    await assert.rejects(box.files.read(path), (e: unknown) => e instanceof TinyboxError && /not UTF-8/.test(e.message));
    // Seen from inside the box: the same bytes and the mode asked for.
    const r = await box.exec(['sh', '-c', 'wc -c < "$1"; stat -c %a "$1"; od -An -tx1 "$1" | head -1', '_', path]);
    const [size, mode, first] = r.stdout.split('\n');
    assert.deepEqual([size.trim(), mode], [String(blob.length), '600']);
    assert.deepEqual(first.trim().split(/\s+/).slice(0, 4), ['00', '01', '02', '03']);
    await box.files.write(inBox(box, 'note.txt'), 'héllo\n');
    assert.equal(await box.files.read(inBox(box, 'note.txt')), 'héllo\n');
    const entries = new Map((await box.files.list(box.workdir ?? '/')).map((e) => [e.name, e]));
    assert.deepEqual([entries.get('blob.bin')?.kind, entries.get('blob.bin')?.size], ['file', blob.length]);
    assert.equal(entries.get('note.txt')?.size, Buffer.byteLength('héllo\n'));
  });

  test('streamed output arrives in pieces as it is printed', async () => {
    // The command prints its second piece only once the test has seen the
    // first and answered by writing the gate file: a stream buffered to the
    // end would never show the first piece in time, and the command would
    // run into its timeout instead.
    const gate = inBox(box, 'gate');
    const script = `printf first; while [ ! -e ${gate} ]; do sleep 0.05; done; printf second >&2; printf third`;
    const stream = box.commands.stream(script, { timeoutSecs: 120 });
    const seen: [string, string][] = [];
    for await (const chunk of stream) {
      const text = Buffer.from(chunk.data).toString();
      seen.push([chunk.stream, text]);
      if (text === 'first') await box.files.write(gate, 'go');
    }
    assert.deepEqual(seen[0], ['stdout', 'first'], JSON.stringify(seen));
    const of = (s: string) => seen.filter(([k]) => k === s).map(([, d]) => d).join('');
    assert.deepEqual([of('stdout'), of('stderr')], ['firstthird', 'second']);
    assert.deepEqual([stream.result?.exitCode, stream.result?.timedOut, stream.result?.stdout], [0, false, 'firstthird']);
    // run() with callbacks streams too, and still resolves to the result.
    const got: string[] = [];
    const push = (d: Uint8Array) => got.push(Buffer.from(d).toString());
    const r = await box.commands.run('echo a; echo b >&2; exit 4', { onStdout: push, onStderr: push });
    assert.deepEqual([r.exitCode, r.stdout, r.stderr], [4, 'a\n', 'b\n']);
    assert.deepEqual(got.sort(), ['a\n', 'b\n']);
  });
});

describe('refusals', () => {
  test("a request over the ceiling is an exception with the server's words", async () => {
    const before = await ids();
    const e = await Sandbox.create({ ttlSecs: 1e8 }).then(
      () => assert.fail('a create over the ceiling was made'),
      (e: unknown) => e,
    );
    assert.ok(e instanceof InvalidRequestError, String(e));
    assert.deepEqual([e.status, e.kind], [400, 'invalid']);
    assert.ok(e.message.startsWith('tinybox: ') && e.message.includes('ceiling'), e.message);
    assert.deepEqual(await ids(), before, 'a refused create makes nothing');
  });

  test('a missing file, a missing box and a wrong token are refused', async () => {
    const box = await Sandbox.create();
    try {
      await assert.rejects(
        box.files.read(inBox(box, 'no-such-file')),
        (e: unknown) => e instanceof TinyboxError && e.message.includes('no-such-file') && (e.status ?? 0) >= 400,
      );
      if (box.sandbox === 'namespace') {
        // Without an image, a namespace box keeps only its workdir.
        await assert.rejects(
          box.snapshot(),
          (e: unknown) => e instanceof UnsupportedError && e.status === 422 && e.message.includes('snapshot'),
        );
      }
    } finally {
      await box.kill();
    }
    await assert.rejects(
      Sandbox.connect('box-99999'),
      (e: unknown) => e instanceof NotFoundError && e.kind === 'box_not_found' && e.message.includes('box-99999'),
    );
    await assert.rejects(
      Sandbox.list({ token: '0'.repeat(64) }),
      (e: unknown) => e instanceof AuthenticationError && e.status === 401 && e.message.includes('token'),
    );
  });
});

describe('kill', () => {
  test('a killed box is gone from the server', async () => {
    const box = await Sandbox.create();
    assert.ok((await ids()).includes(box.id));
    await box.kill();
    assert.ok(!(await ids()).includes(box.id));
    await assert.rejects(box.commands.run('true'), NotFoundError);
    await assert.rejects(box.kill(), NotFoundError);
  });

  test('many commands at once on one box', async () => {
    const box = await Sandbox.create();
    try {
      const outs = await Promise.all([...Array(8).keys()].map((n) => box.exec(['echo', `call-${n}`])));
      assert.deepEqual(
        outs.map((r) => r.stdout),
        [...Array(8).keys()].map((n) => `call-${n}\n`),
      );
    } finally {
      await box.kill();
    }
    assert.ok(!(await ids()).includes(box.id));
  });
});
