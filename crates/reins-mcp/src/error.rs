//! The crate's error type.

/// What went wrong while connecting to an MCP server, listing its tools or registering
/// them. (A failure during a tool call is not an `Error`: it becomes the call's result,
/// which the model sees; see the crate docs for which outcome each fault gets.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server's command could not be started.
    #[error(
        "could not start MCP server `{server}` (`{command}`): {source}; check that the program is installed and on PATH"
    )]
    Spawn {
        /// The server's name.
        server: String,
        /// The program that was run.
        command: String,
        /// Why it could not start.
        source: std::io::Error,
    },
    /// The MCP handshake (`initialize`) did not complete.
    #[error(
        "MCP server `{server}` did not complete the handshake: {message}; check the command line or URL, and the server's log"
    )]
    Handshake {
        /// The server's name.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// The handshake did not finish in time.
    #[error(
        "MCP server `{server}` did not finish the handshake within {seconds} s; raise `connect_timeout` if it is slow to start"
    )]
    ConnectTimeout {
        /// The server's name.
        server: String,
        /// The limit, in seconds.
        seconds: u64,
    },
    /// A request to the server (other than a tool call) failed.
    #[error("MCP server `{server}`: `{method}` failed: {message}")]
    Request {
        /// The server's name.
        server: String,
        /// The MCP method, e.g. `tools/list`.
        method: &'static str,
        /// What went wrong.
        message: String,
    },
    /// Two tools would get the same name in the toolkit.
    #[error(
        "tool name collision: `{name}` would be both {first} and {second}; give one server another prefix (`McpServer::prefix`) or leave one tool out (`McpServer::exclude`)"
    )]
    NameCollision {
        /// The colliding reins tool name.
        name: String,
        /// The first tool, as `` server `a`'s tool `x` `` (or an already registered tool).
        first: String,
        /// The second tool, described the same way.
        second: String,
    },
    /// The server configuration is unusable.
    #[error("invalid configuration for MCP server `{server}`: {message}")]
    Config {
        /// The server's name.
        server: String,
        /// What is wrong.
        message: String,
    },
    /// The toolkit refused a tool.
    #[error("MCP server `{server}`'s tool `{tool}` cannot be registered: {source}")]
    Toolkit {
        /// The server's name.
        server: String,
        /// The MCP tool's name.
        tool: String,
        /// The toolkit's reason.
        source: reins_tool::Error,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collision_names_both_tools_and_the_fix() {
        let e = Error::NameCollision {
            name: "fs__read".into(),
            first: "server `fs`'s tool `read`".into(),
            second: "server `fs`'s tool `read.`".into(),
        };
        let text = e.to_string();
        assert!(text.contains("`fs__read`"), "{text}");
        assert!(text.contains("tool `read`") && text.contains("tool `read.`"));
        assert!(text.contains("prefix"));
    }
}
