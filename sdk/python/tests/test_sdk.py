"""The tinybox Python SDK against a live ``tinybox serve``
(TINYBOX_API_URL / TINYBOX_API_TOKEN; tests/tests/sdk_python.rs starts
one and runs this with the venv's python). TINYBOX_TEST_SANDBOX names the
sandbox the server makes boxes on."""

import os
import threading
import unittest

import tinybox
from tinybox import Sandbox


def _in(box, name):
    return f"{box.workdir.rstrip('/')}/{name}"


class ABox(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.box = Sandbox.create(memory="256M", ttl_secs=600)

    @classmethod
    def tearDownClass(cls):
        cls.box.kill()

    def test_the_box_says_what_confines_it(self):
        box = self.box
        self.assertTrue(box.id.startswith("box-"), box)
        self.assertEqual(box.sandbox, os.environ["TINYBOX_TEST_SANDBOX"])
        self.assertIn(box.isolation, ("process", "kernel", "hardware"))
        self.assertIsInstance(box.verified, bool)
        self.assertEqual(box.suitable_for_untrusted_code, box.raw["suitable_for_untrusted_code"])
        self.assertEqual(box.limits.get("memory_bytes"), 256 << 20, box.limits)
        self.assertEqual(box.network, box.raw["network"])
        self.assertIsNotNone(box.network)
        again = Sandbox.connect(box.id)
        self.assertEqual((again.id, again.isolation, again.limits), (box.id, box.isolation, box.limits))
        self.assertEqual(again.state, "ready")
        self.assertIn(box.id, [b.id for b in Sandbox.list()])

    def test_a_command_s_output_and_exit_code(self):
        r = self.box.commands.run("echo out; echo err >&2; exit 3")
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.ok), (3, "out\n", "err\n", False))
        r = self.box.exec(["printf", "%s|", "a b", "$HOME"])
        self.assertEqual((r.exit_code, r.stdout), (0, "a b|$HOME|"), "an argv runs with no shell")
        r = self.box.commands.run("printf %s \"$GREETING\"; pwd", envs={"GREETING": "hello"}, cwd="/")
        self.assertEqual(r.stdout, "hello/\n")
        r = self.box.commands.run(["cat"], stdin=b"\x00in\xff")
        self.assertEqual(r.stdout_bytes, b"\x00in\xff")
        r = self.box.commands.run("printf '\\377\\000'")
        self.assertEqual(r.stdout_bytes, b"\xff\x00", "output that is not UTF-8 comes back as its bytes")

    def test_files_are_binary_safe(self):
        blob = bytes(range(256)) + b"\x00\xff\xfe\n\x00"
        path = _in(self.box, "blob.bin")
        self.assertEqual(self.box.files.write(path, blob, mode=0o600).bytes, len(blob))
        self.assertEqual(self.box.files.read(path, format="bytes"), blob)
        self.assertEqual(self.box.files.read_bytes(path), blob)
        with self.assertRaises(UnicodeDecodeError):
            self.box.files.read(path)
        # Seen from inside the box: the same bytes and the mode asked for.
        r = self.box.commands.run(["sh", "-c", "wc -c < \"$1\"; stat -c %a \"$1\"; od -An -tx1 \"$1\" | head -1", "_", path])
        size, mode, first = r.stdout.split("\n")[:3]
        self.assertEqual((size.strip(), mode), (str(len(blob)), "600"))
        self.assertEqual(first.split()[:4], ["00", "01", "02", "03"])
        self.box.files.write(_in(self.box, "note.txt"), "héllo\n")
        self.assertEqual(self.box.files.read(_in(self.box, "note.txt")), "héllo\n")
        entries = {e.name: e for e in self.box.files.list(self.box.workdir)}
        self.assertEqual((entries["blob.bin"].kind, entries["blob.bin"].size), ("file", len(blob)))
        self.assertEqual(entries["note.txt"].size, len("héllo\n".encode()))

    def test_streamed_output_arrives_in_pieces_as_it_is_printed(self):
        # The command prints its second piece only once the test has seen the
        # first and answered by writing the gate file: a stream buffered to
        # the end would never show the first piece in time, and the command
        # would run into its timeout instead.
        gate = _in(self.box, "gate")
        script = f'printf first; while [ ! -e {gate} ]; do sleep 0.05; done; printf second >&2; printf third'
        stream = self.box.commands.stream(script, timeout=120)
        seen = []
        for chunk in stream:
            seen.append((chunk.stream, chunk.data))
            if chunk.data == b"first":
                self.box.files.write(gate, b"go")
        self.assertEqual(seen[0], ("stdout", b"first"), seen)
        self.assertEqual(b"".join(d for s, d in seen if s == "stderr"), b"second")
        self.assertEqual(b"".join(d for s, d in seen if s == "stdout"), b"firstthird")
        self.assertEqual((stream.result.exit_code, stream.result.timed_out), (0, False))
        self.assertEqual(stream.result.stdout, "firstthird")
        # run() with callbacks streams too, and still returns the result.
        got = []
        r = self.box.commands.run("echo a; echo b >&2; exit 4", on_stdout=got.append, on_stderr=got.append)
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (4, "a\n", "b\n"))
        self.assertEqual(sorted(got), [b"a\n", b"b\n"])


class Refusals(unittest.TestCase):
    def test_a_request_over_the_ceiling_is_an_exception_with_the_server_s_words(self):
        before = [b.id for b in Sandbox.list()]
        with self.assertRaises(tinybox.InvalidRequestError) as caught:
            Sandbox.create(ttl_secs=10**8)
        e = caught.exception
        self.assertEqual((e.status, e.kind), (400, "invalid"))
        self.assertTrue(e.message.startswith("tinybox: ") and "ceiling" in e.message, e.message)
        self.assertEqual([b.id for b in Sandbox.list()], before, "a refused create makes nothing")

    def test_a_missing_file_a_missing_box_and_a_wrong_token_are_refused(self):
        box = Sandbox.create()
        try:
            with self.assertRaises(tinybox.TinyboxError) as caught:
                box.files.read(_in(box, "no-such-file"))
            self.assertIn("no-such-file", caught.exception.message)
            self.assertGreaterEqual(caught.exception.status, 400)
            if box.sandbox == "namespace":
                # Without an image, a namespace box keeps only its workdir.
                with self.assertRaises(tinybox.UnsupportedError) as snap:
                    box.snapshot()
                self.assertEqual(snap.exception.status, 422)
                self.assertIn("snapshot", snap.exception.message)
        finally:
            box.kill()
        with self.assertRaises(tinybox.NotFoundError) as caught:
            Sandbox.connect("box-99999")
        self.assertEqual(caught.exception.kind, "box_not_found")
        self.assertIn("box-99999", caught.exception.message)
        with self.assertRaises(tinybox.AuthenticationError) as caught:
            Sandbox.list(token="0" * 64)
        self.assertEqual(caught.exception.status, 401)
        self.assertIn("token", caught.exception.message)


class Kill(unittest.TestCase):
    def test_a_killed_box_is_gone_from_the_server(self):
        box = Sandbox.create()
        self.assertIn(box.id, [b.id for b in Sandbox.list()])
        box.kill()
        self.assertNotIn(box.id, [b.id for b in Sandbox.list()])
        with self.assertRaises(tinybox.NotFoundError):
            box.commands.run("true")
        with self.assertRaises(tinybox.NotFoundError):
            box.kill()

    def test_boxes_can_be_used_from_many_threads(self):
        with Sandbox.create() as box:
            out = {}

            def call(n):
                out[n] = box.exec(["echo", f"call-{n}"]).stdout

            threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(out, {n: f"call-{n}\n" for n in range(8)})
        self.assertNotIn(box.id, [b.id for b in Sandbox.list()])


if __name__ == "__main__":
    unittest.main(verbosity=2)
