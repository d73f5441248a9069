package market

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Unmarshal decodes b into m and refuses fields m's type does not know:
// this version reads every field it signs for and checks, so a peer
// cannot pad a message with bytes a node would keep, forward and store
// unread. Every decoder of network input goes through it.
func Unmarshal(b []byte, m proto.Message) error {
	if err := proto.Unmarshal(b, m); err != nil {
		return err
	}
	if f := unknownField(m.ProtoReflect()); f != "" {
		return invalid(f, "unknown field; this node reads version %d", Version)
	}
	return nil
}

// unknownField names the first message, by its field path, that holds
// fields of numbers its type does not declare; "" if none does.
func unknownField(m protoreflect.Message) string {
	if len(m.GetUnknown()) > 0 {
		return string(m.Descriptor().Name())
	}
	var found string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			for i := 0; i < v.List().Len() && found == ""; i++ {
				if f := unknownField(v.List().Get(i).Message()); f != "" {
					found = string(fd.Name()) + "." + f
				}
			}
		default:
			if f := unknownField(v.Message()); f != "" {
				found = string(fd.Name()) + "." + f
			}
		}
		return found == ""
	})
	return found
}
