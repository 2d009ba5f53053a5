import Glibc

/// The entry points of operations that may wait for the network. Each answers through
/// `answer`, exactly once, from whichever thread has the answer first:
///
/// - at once, on the calling (FUSE) thread, when nothing needs waiting for: content here,
///   bytes behind the front of a running download. Most opens and reads end here.
/// - from the thread that lands the bytes, for a placeholder opened for reading and for a
///   read just ahead of a running download: a sequential reader waits so on nearly every
///   request, and a hop through a task was a wake-up more each time.
/// - from a task that waits for what it needs, and says why it failed.
extension FileSystem {
    public func open(_ ino: Int64, flags: Int32, answer: @escaping @Sendable (Result<Opened, FSError>) -> Void) {
        do {
            if let opened = try openIfLocal(ino, flags: flags) { return answer(.success(opened)) }
            let started = try openWhileDownloading(ino, flags: flags) { [self] opened in
                guard let opened else { return openInTask(ino, flags: flags, answer: answer) }
                answer(.success(opened))
            }
            if started { return }
        } catch {
            return answer(.failure(error))
        }
        openInTask(ino, flags: flags, answer: answer)
    }

    func openInTask(_ ino: Int64, flags: Int32, answer: @escaping @Sendable (Result<Opened, FSError>) -> Void) {
        Task {
            do throws(FSError) { answer(.success(try await open(ino, flags: flags))) } catch { answer(.failure(error)) }
        }
    }

    public func read(_ handle: UInt64, offset: Int64, size: Int, answer: @escaping @Sendable (Result<ReadResult, FSError>) -> Void) {
        do {
            if let ready = try readIfLocal(handle, offset: offset, size: size) { return answer(.success(ready)) }
            let waiting = try readWhenLanded(handle, offset: offset, size: size) { [self] result in
                guard let result else { return readInTask(handle, offset: offset, size: size, answer: answer) }
                answer(.success(result))
            }
            if waiting { return }
        } catch {
            return answer(.failure(error))
        }
        readInTask(handle, offset: offset, size: size, answer: answer)
    }

    func readInTask(_ handle: UInt64, offset: Int64, size: Int, answer: @escaping @Sendable (Result<ReadResult, FSError>) -> Void) {
        Task {
            do throws(FSError) { answer(.success(try await read(handle, offset: offset, size: size))) } catch { answer(.failure(error)) }
        }
    }

    /// In a task: truncating a placeholder to a size other than 0 downloads it first.
    public func setAttributes(_ ino: Int64, _ changes: AttributeChanges, handle: UInt64?, answer: @escaping @Sendable (Result<NodeAttributes, FSError>) -> Void) {
        Task {
            do throws(FSError) { answer(.success(try await setAttributes(ino, changes, handle: handle))) } catch { answer(.failure(error)) }
        }
    }
}

/// What is refused, and how, for the kinds of node the mount does not sync (docs/SEMANTICS.md).
extension FileSystem {
    /// Hard links are not supported.
    public func link(_ ino: Int64, newParent: Int64, newName: [UInt8]) throws(FSError) -> NodeAttributes { throw .notPermitted }

    /// Symbolic links are not synced.
    public func symlink(target: [UInt8], parent: Int64, name: [UInt8]) throws(FSError) -> NodeAttributes { throw .notPermitted }

    /// No node is a link, so none has a target to read.
    public func readlink(_ ino: Int64) throws(FSError) -> [UInt8] { throw .invalidArgument }

    /// `mknod` of a regular file (the binding refuses every other type): a file created and
    /// closed at once.
    public func makeNode(parent: Int64, name: [UInt8], mode: UInt32, uid: UInt32, gid: UInt32) throws(FSError) -> NodeAttributes {
        let opened = try createFile(parent: parent, name: name, mode: mode, flags: O_WRONLY | O_EXCL, uid: uid, gid: gid)
        release(opened.handle)
        return opened.attributes
    }
}
