-- A small sample schema for the demo and the tests: a shop with customers and orders.
CREATE DATABASE IF NOT EXISTS shop CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
USE shop;

CREATE TABLE customers (
  id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  email VARCHAR(190) NOT NULL,
  name VARCHAR(100) NOT NULL,
  city VARCHAR(100) NULL,
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  UNIQUE KEY uk_email (email)
) ENGINE=InnoDB;

CREATE TABLE orders (
  order_no BIGINT NOT NULL,
  line_no SMALLINT NOT NULL,
  customer_id INT UNSIGNED NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  note TEXT NULL,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (order_no, line_no)
) ENGINE=InnoDB;

INSERT INTO customers (email, name, city) VALUES
  ('ada@example.com', 'Ada Lovelace', 'London'),
  ('alan@example.com', 'Alan Turing', 'Wilmslow'),
  ('grace@example.com', 'Grace Hopper', NULL),
  ('edsger@example.com', 'Edsger Dijkstra', 'Nuenen');

INSERT INTO orders (order_no, line_no, customer_id, amount, note) VALUES
  (1001, 1, 1, 19.99, 'first order'),
  (1001, 2, 1, 5.00, 'gift wrap, "red"'),
  (1002, 1, 2, 120.50, NULL),
  (1003, 1, 3, 7.25, 'line one\nline two'),
  (1004, 1, 4, 0.00, '');
