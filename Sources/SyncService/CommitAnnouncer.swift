/// How the server processes of one deployment (replicas over one shared database) tell each
/// other that a container changed, so that each wakes its own push streams.
///
/// An announcement carries no change: a woken stream reads the change log from its own cursor
/// (`ChangeHub`), so an announcement that comes twice, late, or for nothing costs one read, and
/// one that is lost is made good by `nil`, which wakes every stream. A backend that several
/// processes share implements it (PostgreSQL: `LISTEN`/`NOTIFY`); one process alone needs none.
public protocol CommitAnnouncer: Sendable {
    /// A commit in the container with this key: tell the others. Called after every commit, on
    /// the committing task; the implementation batches and must not wait for the others.
    func announce(container: Int64)
    /// What the others announce, as it arrives: a container's key, or nil after announcements
    /// may have been missed (the listening connection was lost and is back).
    func announcements() -> AsyncStream<Int64?>
}
