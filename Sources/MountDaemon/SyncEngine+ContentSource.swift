import SyncEngine
import VFS

/// The engine is where the file system's content comes from: its calls are the ones
/// `ContentSource` names, so the conformance is all there is to it.
extension SyncEngine: ContentSource {}
