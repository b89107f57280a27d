import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(("GET %s HTTP/1.1\r\nHost: control\r\nConnection: close\r\n\r\n" % sys.argv[3]).encode())
print(s.recv(4096).decode("latin-1").split("\r\n")[0])
