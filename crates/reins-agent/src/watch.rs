//! [`SessionWatch`]: follow a session's state as other workers change it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use futures::stream::BoxStream;
use std::sync::Arc;

use reins_memory::{ChangeFeed, MemoryStore};
use tokio::sync::broadcast::error::RecvError;

use crate::error::Result;
use crate::run::RunConfig;
use crate::session::Session;
use crate::state::{SessionCore, SessionView};

/// How often a watch re-reads the version when no notice came (a safety net for
/// notices lost while a listener reconnected).
const FALLBACK_CHECK: Duration = Duration::from_secs(5);

/// A stream of a session's views: the current one first, then one each time the stored
/// session changes — a run starts, pauses, is resolved, finishes — whoever changed it
/// (this process, or another worker sharing the store: PostgreSQL LISTEN/NOTIFY,
/// SQLite polling, in memory at once). Views are read from the store, never from a
/// handle's cache; several changes in quick succession may arrive as one view of the
/// latest state. Ends only when the store's feed closes; drop it to stop watching.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use futures::StreamExt;
/// use reins_agent::Agent;
/// use reins_message::Msg;
/// use reins_model::{ScriptedModel, ScriptedResponse};
///
/// let agent = Agent::builder().model(ScriptedModel::new([ScriptedResponse::text("hi")])).build()?;
/// let session = agent.session("chat").await?;
/// let mut watch = session.watch().await?;
/// assert!(!watch.next().await.unwrap()?.paused); // the view now
/// session.send(Msg::user("hello")).await?;
/// let later = watch.next().await.unwrap()?; // the run's commits, as the store has them
/// assert!(later.version > 0);
/// # Ok(()) }
/// ```
pub struct SessionWatch {
    inner: BoxStream<'static, Result<SessionView>>,
}

impl std::fmt::Debug for SessionWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWatch").finish_non_exhaustive()
    }
}

struct State {
    store: Arc<dyn MemoryStore>,
    config: RunConfig,
    id: String,
    feed: ChangeFeed,
    last: Option<u64>,
    first: bool,
}

impl SessionWatch {
    async fn new(store: Arc<dyn MemoryStore>, config: RunConfig, id: String) -> Result<Self> {
        let feed = store.changes().await?;
        let state = State {
            store,
            config,
            id,
            feed,
            last: None,
            first: true,
        };
        let inner = futures::stream::unfold(state, |mut st| async move {
            loop {
                if !st.first {
                    let woke = tokio::select! {
                        r = st.feed.recv() => match r {
                            Ok(c) => c.concerns(&st.id),
                            Err(RecvError::Lagged(_)) => true,
                            Err(RecvError::Closed) => return None,
                        },
                        () = tokio::time::sleep(FALLBACK_CHECK) => true,
                    };
                    if !woke {
                        continue;
                    }
                }
                st.first = false;
                let store = &st.store;
                match store.session_version(&st.id).await {
                    Ok(v) if v.is_some() && v == st.last => continue,
                    Ok(None) => continue,
                    Ok(Some(_)) => {}
                    Err(e) => return Some((Err(e.into()), st)),
                }
                let view = match store.load_session(&st.id).await {
                    Ok(state) => {
                        SessionCore::from_state(state, st.config).map(|core| core.view_of(&st.id))
                    }
                    Err(e) => Err(e.into()),
                };
                if let Ok(v) = &view {
                    st.last = Some(v.version);
                }
                return Some((view, st));
            }
        });
        Ok(Self {
            inner: Box::pin(inner),
        })
    }
}

impl Stream for SessionWatch {
    type Item = Result<SessionView>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl Session {
    /// A stream of the session's views, starting with the current one and then one per
    /// stored change, whoever made it (this process or another worker sharing the
    /// store). See [`SessionWatch`].
    pub async fn watch(&self) -> Result<SessionWatch> {
        SessionWatch::new(
            self.agent.runtime.store.clone(),
            self.agent.config.run,
            self.id().to_owned(),
        )
        .await
    }
}
