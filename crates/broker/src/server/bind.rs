//! Listener sockets bound before the logs load but listening only once they are loaded.
//!
//! A broker must know its listeners' ports (port 0 picks one) to register its advertised
//! endpoints before it loads its logs, yet a listening socket has the kernel complete TCP
//! handshakes that nothing can serve until the load ends (seconds after an unclean shutdown).
//! Kafka opens its sockets only after the logs are loaded: [`UnlistenedSocket`] binds the
//! address (so the port is taken and known) and [`UnlistenedSocket::listen`] starts listening
//! later; meanwhile a connection attempt is refused and the client tries again.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// Pending connections the kernel queues per listener, as `tokio::net::TcpListener::bind`.
pub(super) const LISTEN_BACKLOG: u32 = 1024;

/// A TCP socket bound to its address, not listening yet.
#[derive(Debug)]
pub(super) struct UnlistenedSocket {
    socket: TcpSocket,
    local_addr: SocketAddr,
}

impl UnlistenedSocket {
    /// Binds `addr` (with `SO_REUSEADDR`, as `TcpListener::bind`) without listening.
    pub(super) fn bind(addr: SocketAddr) -> io::Result<Self> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        // Restarting on the same port must not wait for the old connections' TIME_WAIT.
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        let local_addr = socket.local_addr()?;
        Ok(Self { socket, local_addr })
    }

    /// The bound address (its port is the chosen one when port 0 was asked for).
    pub(super) fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Starts listening: from now on the kernel accepts connections into the backlog.
    pub(super) fn listen(self, backlog: u32) -> io::Result<TcpListener> {
        self.socket.listen(backlog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_are_refused_until_listen() {
        let bound = UnlistenedSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = bound.local_addr();
        assert_ne!(addr.port(), 0, "an ephemeral port is chosen at bind");
        let refused = tokio::net::TcpStream::connect(addr).await;
        assert_eq!(
            refused.map(|_| ()).map_err(|e| e.kind()),
            Err(io::ErrorKind::ConnectionRefused),
            "a bound socket that does not listen refuses connections"
        );
        let listener = bound.listen(LISTEN_BACKLOG).unwrap();
        assert_eq!(listener.local_addr().unwrap(), addr);
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (_, peer) = listener.accept().await.unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
    }
}
