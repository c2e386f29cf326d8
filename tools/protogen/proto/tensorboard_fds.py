"""Writes tensorboard.fds: the FileDescriptorSet of TensorBoard's event, summary and hparams
protobufs, taken from the `tensorboard` Python package (2.21, Apache-2.0), which ships
them compiled rather than as .proto files. tools/protogen turns it into Rust.

    pip install tensorboard==2.21.0 && python tools/protogen/proto/tensorboard_fds.py
"""
import os

from google.protobuf import descriptor_pb2
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.hparams import plugin_data_pb2

files = {}


def add(fd):
    for dep in fd.dependencies:
        add(dep)
    if fd.name not in files:
        proto = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(proto)
        files[fd.name] = proto


add(event_pb2.DESCRIPTOR)
add(plugin_data_pb2.DESCRIPTOR)
fds = descriptor_pb2.FileDescriptorSet(file=list(files.values()))
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tensorboard.fds")
with open(out, "wb") as f:
    f.write(fds.SerializeToString())
print(f"wrote {out}: {', '.join(files)}")
