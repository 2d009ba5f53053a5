import Foundation
import ItemModel
import NIOCore
import ServerStorage

/// A zip archive written as it goes, for a shared folder's `?download=zip`: each member's
/// header, its bytes read from the blob store in chunks, and a data descriptor with its CRC-32
/// (known only once the bytes have passed), then the central directory. Nothing is held but
/// one chunk and the directory's entries. Members are stored, not compressed (shared files are
/// mostly photos, videos and documents that compress no further, and storing streams at disk
/// speed). Names are UTF-8 (flag bit 11); ZIP64 records are written where a size or an offset
/// passes 32 bits, so any size of folder unpacks.
struct ZipStream {
    struct Member {
        var name: String
        var size: Int64
        var modified: Timestamp
        var digest: ContentDigest
    }

    /// Where 32-bit fields end; lower in tests, so that the ZIP64 records are written (and
    /// read back by another implementation) without gigabytes of data.
    var zip64Threshold: Int64 = 0xFFFF_FFFF

    private struct Written {
        var name: [UInt8]
        var crc: UInt32
        var size: Int64
        var offset: Int64
        var dosTime: UInt16
        var dosDate: UInt16
    }

    /// Writes the archive: `open` gives each member's bytes, `emit` takes each chunk in order.
    func write(
        _ members: [Member], open: (ContentDigest) async throws -> any BlobReader, emit: (ByteBuffer) async throws -> Void
    ) async throws {
        var written: [Written] = []
        var offset: Int64 = 0
        let allocator = ByteBufferAllocator()
        for member in members {
            let name = Array(member.name.utf8)
            let (time, date) = Self.dosTime(member.modified)
            let large = member.size >= zip64Threshold
            var header = allocator.buffer(capacity: 64 + name.count)
            header.writeInteger(UInt32(0x0403_4B50), endianness: .little)
            header.writeInteger(UInt16(large ? 45 : 20), endianness: .little)
            header.writeInteger(UInt16(0x0808), endianness: .little)  // data descriptor, UTF-8 name
            header.writeInteger(UInt16(0), endianness: .little)  // stored
            header.writeInteger(time, endianness: .little)
            header.writeInteger(date, endianness: .little)
            header.writeInteger(UInt32(0), endianness: .little)  // CRC: in the descriptor
            header.writeInteger(UInt32(large ? 0xFFFF_FFFF : 0), endianness: .little)
            header.writeInteger(UInt32(large ? 0xFFFF_FFFF : 0), endianness: .little)
            header.writeInteger(UInt16(name.count), endianness: .little)
            header.writeInteger(UInt16(large ? 20 : 0), endianness: .little)
            header.writeBytes(name)
            if large {
                header.writeInteger(UInt16(0x0001), endianness: .little)
                header.writeInteger(UInt16(16), endianness: .little)
                header.writeInteger(UInt64(0), endianness: .little)
                header.writeInteger(UInt64(0), endianness: .little)
            }
            let headerSize = Int64(header.readableBytes)
            try await emit(header)

            var crc = CRC32()
            let reader = try await open(member.digest)
            defer { reader.close() }
            guard reader.size >= member.size else { throw ZipStreamError.contentEndedEarly(member.name) }
            try await reader.read(0..<member.size, chunkSize: 1 << 20) { chunk in
                chunk.withUnsafeReadableBytes { crc.update($0) }
                try await emit(chunk)
            }

            var descriptor = allocator.buffer(capacity: 24)
            descriptor.writeInteger(UInt32(0x0807_4B50), endianness: .little)
            descriptor.writeInteger(crc.value, endianness: .little)
            if large {
                descriptor.writeInteger(UInt64(member.size), endianness: .little)
                descriptor.writeInteger(UInt64(member.size), endianness: .little)
            } else {
                descriptor.writeInteger(UInt32(member.size), endianness: .little)
                descriptor.writeInteger(UInt32(member.size), endianness: .little)
            }
            let descriptorSize = Int64(descriptor.readableBytes)
            try await emit(descriptor)
            written.append(Written(name: name, crc: crc.value, size: member.size, offset: offset, dosTime: time, dosDate: date))
            offset += headerSize + member.size + descriptorSize
        }

        let directoryStart = offset
        var directory = allocator.buffer(capacity: written.reduce(0) { $0 + 78 + $1.name.count })
        for w in written {
            let bigSize = w.size >= zip64Threshold, bigOffset = w.offset >= zip64Threshold
            var extra: [UInt64] = []
            if bigSize { extra += [UInt64(w.size), UInt64(w.size)] }
            if bigOffset { extra.append(UInt64(w.offset)) }
            directory.writeInteger(UInt32(0x0201_4B50), endianness: .little)
            directory.writeInteger(UInt16(0x031E), endianness: .little)  // made by: Unix, 3.0
            directory.writeInteger(UInt16(extra.isEmpty ? 20 : 45), endianness: .little)
            directory.writeInteger(UInt16(0x0808), endianness: .little)
            directory.writeInteger(UInt16(0), endianness: .little)
            directory.writeInteger(w.dosTime, endianness: .little)
            directory.writeInteger(w.dosDate, endianness: .little)
            directory.writeInteger(w.crc, endianness: .little)
            directory.writeInteger(bigSize ? UInt32(0xFFFF_FFFF) : UInt32(w.size), endianness: .little)
            directory.writeInteger(bigSize ? UInt32(0xFFFF_FFFF) : UInt32(w.size), endianness: .little)
            directory.writeInteger(UInt16(w.name.count), endianness: .little)
            directory.writeInteger(UInt16(extra.isEmpty ? 0 : 4 + 8 * extra.count), endianness: .little)
            directory.writeInteger(UInt16(0), endianness: .little)  // comment
            directory.writeInteger(UInt16(0), endianness: .little)  // disk
            directory.writeInteger(UInt16(0), endianness: .little)  // internal attributes
            directory.writeInteger(UInt32(0o100644) << 16, endianness: .little)  // a regular file, rw-r--r--
            directory.writeInteger(bigOffset ? UInt32(0xFFFF_FFFF) : UInt32(w.offset), endianness: .little)
            directory.writeBytes(w.name)
            if !extra.isEmpty {
                directory.writeInteger(UInt16(0x0001), endianness: .little)
                directory.writeInteger(UInt16(8 * extra.count), endianness: .little)
                for value in extra { directory.writeInteger(value, endianness: .little) }
            }
        }
        let directorySize = Int64(directory.readableBytes)
        let zip64End = Int64(written.count) >= min(0xFFFF, zip64Threshold) || directoryStart >= zip64Threshold || directorySize >= zip64Threshold
        if zip64End {
            let recordStart = directoryStart + directorySize
            directory.writeInteger(UInt32(0x0606_4B50), endianness: .little)
            directory.writeInteger(UInt64(44), endianness: .little)
            directory.writeInteger(UInt16(0x031E), endianness: .little)
            directory.writeInteger(UInt16(45), endianness: .little)
            directory.writeInteger(UInt32(0), endianness: .little)
            directory.writeInteger(UInt32(0), endianness: .little)
            directory.writeInteger(UInt64(written.count), endianness: .little)
            directory.writeInteger(UInt64(written.count), endianness: .little)
            directory.writeInteger(UInt64(directorySize), endianness: .little)
            directory.writeInteger(UInt64(directoryStart), endianness: .little)
            directory.writeInteger(UInt32(0x0706_4B50), endianness: .little)
            directory.writeInteger(UInt32(0), endianness: .little)
            directory.writeInteger(UInt64(recordStart), endianness: .little)
            directory.writeInteger(UInt32(1), endianness: .little)
        }
        directory.writeInteger(UInt32(0x0605_4B50), endianness: .little)
        directory.writeInteger(UInt16(0), endianness: .little)
        directory.writeInteger(UInt16(0), endianness: .little)
        directory.writeInteger(zip64End ? UInt16(0xFFFF) : UInt16(written.count), endianness: .little)
        directory.writeInteger(zip64End ? UInt16(0xFFFF) : UInt16(written.count), endianness: .little)
        directory.writeInteger(zip64End ? UInt32(0xFFFF_FFFF) : UInt32(directorySize), endianness: .little)
        directory.writeInteger(zip64End ? UInt32(0xFFFF_FFFF) : UInt32(directoryStart), endianness: .little)
        directory.writeInteger(UInt16(0), endianness: .little)
        try await emit(directory)
    }

    /// MS-DOS time and date (what zip keeps), in UTC; 1980 at the earliest.
    static func dosTime(_ time: Timestamp) -> (time: UInt16, date: UInt16) {
        var seconds = time_t(max(time / 1_000_000_000, 315_532_800))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let t = UInt16(parts.tm_hour << 11 | parts.tm_min << 5 | parts.tm_sec / 2)
        let d = UInt16((parts.tm_year - 80) << 9 | (parts.tm_mon + 1) << 5 | parts.tm_mday)
        return (t, d)
    }
}

enum ZipStreamError: Error {
    case contentEndedEarly(String)
}

/// CRC-32 (IEEE 802.3, reflected, as zip and gzip use), table-driven.
struct CRC32 {
    private(set) var value: UInt32 = 0

    static let table: [UInt32] = (0..<256).map { n -> UInt32 in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        var c = ~value
        for byte in bytes { c = Self.table[Int((c ^ UInt32(byte)) & 0xFF)] ^ (c >> 8) }
        value = ~c
    }
}
