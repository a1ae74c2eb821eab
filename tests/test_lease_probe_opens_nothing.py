"""The kernel's open-writer answer (``openfiles.no_writer_anywhere``, asked by every open-writer check
of up to 256 files) looks at a path through an ``O_PATH`` descriptor before it opens anything: a
FIFO or a device standing at a run's file name (or reached through a folder replaced by a link)
is never opened (review R15 F3: a folder swapped for a link to ``/dev`` had ``/dev/null`` opened;
as root any device, whose open may act). Opening a FIFO for reading is observable: it lets a
writer blocked in its ``open`` go on."""
import os
import threading

from tb_footprint_plugin.storage.openfiles import no_writer_anywhere


def test_a_fifo_at_the_name_is_not_opened(tmp_path):
    fifo = tmp_path / "events.out.tfevents.1"
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer():
        fd = os.open(fifo, os.O_WRONLY)  # blocks until someone opens the FIFO for reading
        opened.set()
        os.close(fd)
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    assert no_writer_anywhere(str(fifo)) is None
    assert not opened.wait(0.5), "the probe opened the FIFO for reading"
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # let the writer go
    t.join(5)
    os.close(fd)


def test_a_folder_replaced_by_a_link_to_dev_opens_no_device(tmp_path):
    (tmp_path / "run").symlink_to("/dev")
    assert no_writer_anywhere(str(tmp_path / "run" / "null")) is None


def test_a_regular_file_nobody_writes_is_still_cleared(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"x")
    assert no_writer_anywhere(str(f)) is True
    with open(f, "ab"):
        assert no_writer_anywhere(str(f)) is False
