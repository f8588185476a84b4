//! `open-socket` (sandbox test): tries to open a TCP connection on the first
//! batch with a record.
//!
//! Config `addr` (default `127.0.0.1:80`). With no network granted the
//! connect fails and the operator returns `cannot connect to {addr}: …`. If
//! it succeeds (a sandbox escape), it emits the record `connected`.

use std::net::TcpStream;

use weir_sdk::{Batch, BatchBuilder, Emitted, Error, OpenContext, Operator, Record};

/// The connector.
pub struct OpenSocket {
    addr: String,
}

impl Operator for OpenSocket {
    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(OpenSocket {
            addr: ctx
                .config()
                .get_str("addr")
                .unwrap_or("127.0.0.1:80")
                .to_owned(),
        })
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        if input.is_empty() {
            return Ok(Emitted::empty());
        }
        match TcpStream::connect(self.addr.as_str()) {
            Ok(_stream) => {
                let mut out = BatchBuilder::new();
                out.push(Record::new("connected", 0));
                Ok(Emitted::main(out.finish()))
            }
            Err(e) => Err(Error::new(format!("cannot connect to {}: {e}", self.addr))),
        }
    }
}

weir_sdk::export_operator!(OpenSocket);
