import Foundation
import Synchronization
import UbiqKit

/// A terminal text editor for the `.txt` documents of a ubiq container's Documents folder,
/// written against UbiqKit as an iCloud app is written against Apple's API: a live metadata
/// query keeps the list of documents, resource values tell each one's sync state, file versions
/// resolve conflicts, and the key-value store keeps the settings every device shares.
///
/// It reads one command a line from standard input and answers each with any lines of its own
/// and then one line that starts with `ok` or `error`, so that a person and a program can both
/// drive it. Lines that start with `notice` come when something changes elsewhere.
@main
struct SimpleTextEditor {
    static let usage = """
        usage: simple-text-editor [--container-url PATH] [--registry DIR]

          --container-url PATH  any path in the mount to edit (default: the default container's)
          --registry DIR        the registry of running mounts, for a program started outside
                                the session that made them (default: $XDG_RUNTIME_DIR/ubiq/mounts)

        commands, one a line:
          list                         the documents, with their sync state
          new NAME                     an empty document
          write NAME TEXT              saves TEXT as the document's content
          show NAME                    the document's text, one `text` line each
          download NAME                starts downloading the document
          status NAME                  its download, upload and conflict state
          conflicts NAME               its conflict versions
          resolve NAME keep-current    keeps the current content, drops the conflict versions
          resolve NAME keep VERSION    makes a conflict version the content
          font-size N                  sets the font size all devices share
          settings                     the shared settings
          wait-for NAME [SECONDS]      waits until the live list has NAME (default 30 s)
          quit
        A NAME without `.txt` gets it.
        """

    static func main() async {
        var arguments = CommandLine.arguments.dropFirst()
        var containerPath: String?
        var registry = MountRegistryLocation.standard
        while let argument = arguments.popFirst() {
            switch argument {
            case "--container-url", "--registry":
                guard let value = arguments.popFirst() else { exitWithUsage("\(argument) needs a value") }
                if argument == "--registry" { registry = MountRegistryLocation(directory: value) } else { containerPath = value }
            case "-h", "--help":
                Console.say(usage)
                exit(0)
            default:
                exitWithUsage("unknown argument '\(argument)'")
            }
        }

        // As an iCloud app asks for its container at launch: none means iCloud is off here.
        let container: URL
        if let containerPath {
            guard let top = mountTop(containing: URL(fileURLWithPath: containerPath), registry: registry) else {
                exitWithError("\(containerPath) is not in a running ubiq mount")
            }
            container = top
        } else {
            guard let top = UbiquityContainer.url(forIdentifier: nil, registry: registry) else {
                exitWithError("no running ubiq mount in \(registry.directory): start one with `ubiq mount`")
            }
            container = top
        }

        let editor: Editor
        do {
            editor = try Editor(container: container, registry: registry)
            let count = try await editor.start()
            Console.say("ready \(count) documents in \(editor.documents.path)")
        } catch {
            exitWithError("\(error)")
        }
        for await line in standardInputLines() {
            guard await editor.perform(line) else { break }
        }
        editor.stop()
    }

    /// The top of the mount that holds `url`: the highest folder above it on the same file
    /// system. Documents live in the container's `Documents` folder, whatever path was given.
    static func mountTop(containing url: URL, registry: MountRegistryLocation) -> URL? {
        let start = url.resolvingSymlinksInPath()
        // Throws for a path outside a mount, or one that is not there.
        guard (try? UbiquitousItem.resourceValues(at: start, registry: registry)) != nil else { return nil }
        var info = stat()
        guard stat(start.path, &info) == 0 else { return nil }
        var top = start
        while top.path != "/" {
            let parent = top.deletingLastPathComponent()
            var above = stat()
            guard stat(parent.path, &above) == 0, above.st_dev == info.st_dev else { break }
            top = parent
        }
        return top
    }

    /// Each line of standard input, read on a thread of its own: a blocking read in a task
    /// would hold one of the few threads that the query's and the store's tasks run on.
    static func standardInputLines() -> AsyncStream<String> {
        AsyncStream { continuation in
            Thread.detachNewThread {
                while let line = readLine() { continuation.yield(line) }
                continuation.finish()
            }
        }
    }

    static func exitWithUsage(_ message: String) -> Never {
        FileHandle.standardError.write(Data("simple-text-editor: \(message)\n\(usage)\n".utf8))
        exit(64)  // EX_USAGE
    }

    static func exitWithError(_ message: String) -> Never {
        FileHandle.standardError.write(Data("simple-text-editor: \(message)\n".utf8))
        exit(1)
    }
}

/// Whole lines to standard output, unbuffered: the query's and the store's notices are written
/// from their own tasks between a command's lines, and a reader must never find half of one
/// line inside another, nor wait for a buffer to fill.
enum Console {
    static let lock = Mutex(())

    static func say(_ line: String) {
        lock.withLock { _ in FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
    }
}
