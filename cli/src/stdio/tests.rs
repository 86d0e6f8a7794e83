//! The pumps on their own: what is handed over as it is, bytes exact on the
//! splice path and the buffered one, and how long a pump waits for a
//! stream whose end never comes.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::sync::mpsc;

use super::*;

/// Bounds a hung pump; asserts nothing about speed.
const GUARD: Duration = Duration::from_secs(30);

fn payload(len: usize) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

/// An output pipe as `Pumps::output` makes it, and the `ended` signal.
fn output_pipe() -> (PipeReader, PipeWriter, PipeReader, PipeWriter) {
    let (reader, writer) = io::pipe().unwrap();
    rustix::io::ioctl_fionbio(&reader, true).unwrap();
    let (ended_reader, ended_writer) = io::pipe().unwrap();
    (reader, writer, ended_reader, ended_writer)
}

/// Runs `drain` on a thread; its result, or a failed test after the guard.
fn drain_within(reader: PipeReader, dest: std::fs::File, ended: PipeReader, linger: Duration) -> io::Result<()> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(drain(&reader, dest.as_fd(), &ended, linger));
    });
    rx.recv_timeout(GUARD).expect("the pump ended")
}

#[test]
fn only_pipes_sockets_and_dev_null_are_handed_over() {
    let (r, w) = io::pipe().unwrap();
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let null = std::fs::File::open("/dev/null").unwrap();
    for harmless in [r.as_fd(), w.as_fd(), a.as_fd(), null.as_fd()] {
        assert!(reopens_harmlessly(harmless).unwrap());
    }
    let file = tempfile::tempfile().unwrap();
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let dir = std::fs::File::open("/").unwrap();
    for reopenable in [file.as_fd(), zero.as_fd(), dir.as_fd()] {
        assert!(!reopens_harmlessly(reopenable).unwrap());
    }
}

#[test]
fn output_reaches_a_file_byte_exact_whether_spliced_or_appended() {
    let bytes = payload(3 << 20);
    for append in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        std::fs::write(&path, b"kept\n").unwrap();
        let dest = if append {
            std::fs::OpenOptions::new().append(true).open(&path).unwrap()
        } else {
            let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).unwrap();
            f
        };
        let (reader, mut writer, ended, _ended_writer) = output_pipe();
        let feed = bytes.clone();
        let feeder = std::thread::spawn(move || writer.write_all(&feed));
        drain_within(reader, dest, ended, LINGER).unwrap();
        feeder.join().unwrap().unwrap();
        let got = std::fs::read(&path).unwrap();
        assert_eq!(&got[..5], b"kept\n", "append={append}");
        assert!(got[5..] == bytes[..], "append={append}: {} bytes arrived of {}", got.len() - 5, bytes.len());
    }
}

#[test]
fn a_stream_held_open_is_given_up_after_the_linger_with_every_byte_written_before() {
    let (reader, mut writer, ended, ended_writer) = output_pipe();
    let dest = tempfile::NamedTempFile::new().unwrap();
    writer.write_all(b"before the end\n").unwrap();
    // The command has ended; `writer` is the process it left behind.
    drop(ended_writer);
    drain_within(reader, dest.reopen().unwrap(), ended, Duration::from_millis(200)).unwrap();
    assert_eq!(std::fs::read(dest.path()).unwrap(), b"before the end\n");
    drop(writer);
}

#[test]
fn a_writer_that_never_stops_cannot_keep_the_pump() {
    let (reader, writer, ended, ended_writer) = output_pipe();
    let endless = std::thread::spawn(move || {
        let mut writer = writer;
        let block = [b'y'; 4096];
        while writer.write_all(&block).is_ok() {}
    });
    drop(ended_writer);
    let dest = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
    drain_within(reader, dest, ended, Duration::from_millis(200)).unwrap();
    // The pump dropped its end: the writer sees a broken pipe and stops.
    endless.join().unwrap();
}

#[test]
fn an_input_file_reaches_the_pipe_byte_exact_then_its_end() {
    let bytes = payload((1 << 20) + 17);
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(&bytes).unwrap();
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0)).unwrap();
    let mut pumps = Pumps::new().unwrap();
    let pipe = pumps.input(file.into()).unwrap();
    assert!(reopens_harmlessly(pipe.as_fd()).unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let _ = tx.send(std::fs::File::from(pipe).read_to_end(&mut got).map(|_| got));
    });
    let got = rx.recv_timeout(GUARD).expect("end of file reached the reader").unwrap();
    assert!(got == bytes, "{} bytes arrived of {}", got.len(), bytes.len());
}
