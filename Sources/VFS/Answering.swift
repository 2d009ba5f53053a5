import Glibc
import ItemModel

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

/// Links and special files (docs/SEMANTICS.md, "Links and special files").
extension FileSystem {
    /// Hard links are not supported: an item has one place.
    public func link(_ ino: Int64, newParent: Int64, newName: [UInt8]) throws(FSError) -> NodeAttributes { throw .notPermitted }

    /// A link keeps its target as given: never resolved, never rewritten.
    public func symlink(target: [UInt8], parent: Int64, name: [UInt8], uid: UInt32, gid: UInt32) throws(FSError) -> NodeAttributes {
        let text: String
        do { text = try SymlinkTarget.text(target) } catch { throw .invalidTarget(error) }
        return try makeItemWithoutContent(
            .symlink, parent: parent, name: name, mode: ItemMetadata.defaultMode(for: .symlink), target: text, uid: uid, gid: gid)
    }

    public func readlink(_ ino: Int64) throws(FSError) -> [UInt8] {
        let item = try item(ino)
        guard item.kind == .symlink, let target = item.target else { throw .invalidArgument }
        return Array(target.utf8)
    }

    /// The types `mknod` can make here. Device nodes are refused: a node that opens this
    /// machine's hardware has no meaning on another.
    public enum NodeType: Sendable {
        case regular, fifo, socket, device
    }

    /// `mknod`: a regular file is created and closed at once; a FIFO or a socket is a
    /// local-only item (its pipe or socket lives in the kernel).
    public func makeNode(parent: Int64, name: [UInt8], type: NodeType, mode: UInt32, uid: UInt32, gid: UInt32) throws(FSError) -> NodeAttributes {
        switch type {
        case .regular:
            let opened = try createFile(parent: parent, name: name, mode: mode, flags: O_WRONLY | O_EXCL, uid: uid, gid: gid)
            release(opened.handle)
            return opened.attributes
        case .fifo:
            return try makeItemWithoutContent(.fifo, parent: parent, name: name, mode: mode, uid: uid, gid: gid)
        case .socket:
            return try makeItemWithoutContent(.socket, parent: parent, name: name, mode: mode, uid: uid, gid: gid)
        case .device:
            throw .notPermitted
        }
    }
}
